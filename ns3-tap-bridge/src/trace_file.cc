// Parsers of the trace-driven link's files (see trace_file.h).
#include "trace_file.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

namespace mptund
{

namespace
{

std::string
ReadFile(const std::string& path)
{
    std::ifstream in(path);
    if (!in)
    {
        throw TraceFileError(path + ": cannot open the trace file (check the path; relative paths are taken from "
                                    "the directory ns-3 runs in)");
    }
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

std::string
Trim(const std::string& text)
{
    const char* space = " \t\r";
    size_t first = text.find_first_not_of(space);
    if (first == std::string::npos)
    {
        return "";
    }
    return text.substr(first, text.find_last_not_of(space) - first + 1);
}

std::string
Where(const std::string& origin, size_t line)
{
    return origin + ":" + std::to_string(line) + ": ";
}

/// A non-negative integer made of decimal digits only (no sign, no fraction).
bool
ParseMs(const std::string& text, uint64_t& value)
{
    if (text.empty() || text.size() > 15 || text.find_first_not_of("0123456789") != std::string::npos)
    {
        return false;
    }
    value = std::stoull(text);
    return true;
}

} // namespace

DeliveryTrace
DeliveryTrace::Parse(const std::string& text, const std::string& origin)
{
    DeliveryTrace trace;
    std::istringstream lines(text);
    std::string line;
    size_t number = 0;
    while (std::getline(lines, line))
    {
        ++number;
        std::string value = Trim(line);
        if (value.empty())
        {
            continue;
        }
        uint64_t ms = 0;
        if (!ParseMs(value, ms))
        {
            throw TraceFileError(Where(origin, number) + "'" + value +
                                 "' is not a millisecond timestamp (Mahimahi trace: one whole number per line)");
        }
        if (!trace.m_opportunitiesMs.empty() && ms < trace.m_opportunitiesMs.back())
        {
            throw TraceFileError(Where(origin, number) + "time goes backwards (" + value + " after " +
                                 std::to_string(trace.m_opportunitiesMs.back()) + "); sort the timestamps");
        }
        trace.m_opportunitiesMs.push_back(ms);
    }
    if (trace.m_opportunitiesMs.empty())
    {
        throw TraceFileError(origin + ": the trace has no timestamps (Mahimahi trace: one millisecond per line)");
    }
    trace.m_periodMs = trace.m_opportunitiesMs.back();
    if (trace.m_periodMs == 0)
    {
        throw TraceFileError(origin + ": the last timestamp is 0 ms, but it is the loop period; end the trace "
                                      "with a timestamp above 0");
    }
    return trace;
}

DeliveryTrace
DeliveryTrace::Load(const std::string& path)
{
    return Parse(ReadFile(path), path);
}

uint64_t
DeliveryTrace::OpportunityMs(uint64_t index) const
{
    uint64_t perPeriod = m_opportunitiesMs.size();
    return index / perPeriod * m_periodMs + m_opportunitiesMs[index % perPeriod];
}

uint64_t
DeliveryTrace::FirstIndexAtOrAfterMs(double ms) const
{
    if (ms <= 0)
    {
        return 0;
    }
    auto cycle = static_cast<uint64_t>(ms / m_periodMs);
    double position = ms - static_cast<double>(cycle * m_periodMs);
    if (position <= 0 && cycle > 0)
    {
        // Exactly at a period boundary: the previous cycle's opportunities at
        // its last timestamp (= the period) happen now, count them here.
        --cycle;
        position = static_cast<double>(m_periodMs);
    }
    // Opportunities fall on whole milliseconds: the first at or after `position`.
    auto within = std::lower_bound(m_opportunitiesMs.begin(), m_opportunitiesMs.end(), position,
                                   [](uint64_t at, double wanted) { return static_cast<double>(at) < wanted; });
    return cycle * m_opportunitiesMs.size() + static_cast<uint64_t>(within - m_opportunitiesMs.begin());
}

uint64_t
DeliveryTrace::CountBetweenMs(double fromMs, double toMs) const
{
    if (toMs <= fromMs)
    {
        return 0;
    }
    return FirstIndexAtOrAfterMs(toMs) - FirstIndexAtOrAfterMs(fromMs);
}

double
DeliveryTrace::MeanBitPerS(uint32_t bytesPerOpportunity) const
{
    return static_cast<double>(Count()) * bytesPerOpportunity * 8 / (static_cast<double>(m_periodMs) / 1000);
}

DelaySeries
DelaySeries::Parse(const std::string& text, const std::string& origin, uint64_t periodMs)
{
    DelaySeries series;
    series.m_periodMs = periodMs;
    std::istringstream lines(text);
    std::string line;
    size_t number = 0;
    bool header = false;
    while (std::getline(lines, line))
    {
        ++number;
        std::string row = Trim(line);
        if (row.empty() || row[0] == '#')
        {
            continue;
        }
        if (!header)
        {
            if (row != "time_ms,delay_ms")
            {
                throw TraceFileError(Where(origin, number) + "expected the header 'time_ms,delay_ms', found '" +
                                     row + "'");
            }
            header = true;
            continue;
        }
        size_t comma = row.find(',');
        if (comma == std::string::npos || row.find(',', comma + 1) != std::string::npos)
        {
            throw TraceFileError(Where(origin, number) + "expected two fields 'time_ms,delay_ms', found '" + row +
                                 "'");
        }
        std::string atText = Trim(row.substr(0, comma));
        std::string delayText = Trim(row.substr(comma + 1));
        uint64_t atMs = 0;
        if (!ParseMs(atText, atMs))
        {
            throw TraceFileError(Where(origin, number) + "time_ms '" + atText + "' is not a whole number of ms");
        }
        double delayMs = -1;
        try
        {
            size_t used = 0;
            delayMs = std::stod(delayText, &used);
            if (used != delayText.size())
            {
                delayMs = -1;
            }
        }
        catch (const std::exception&)
        {
            delayMs = -1;
        }
        if (!(delayMs >= 0 && delayMs < 60000))
        {
            throw TraceFileError(Where(origin, number) + "delay_ms '" + delayText +
                                 "' is not a delay between 0 and 60000 ms");
        }
        if (series.m_steps.empty() && atMs != 0)
        {
            throw TraceFileError(Where(origin, number) + "the first row must be at time_ms 0 (the delay from the "
                                                         "start), found " + atText);
        }
        if (!series.m_steps.empty() && atMs <= series.m_steps.back().atMs)
        {
            throw TraceFileError(Where(origin, number) + "time_ms " + atText + " does not come after the row before");
        }
        if (atMs >= periodMs)
        {
            throw TraceFileError(Where(origin, number) + "time_ms " + atText + " is not before the delivery trace's "
                                 "period (" + std::to_string(periodMs) + " ms), with which the series loops");
        }
        series.m_steps.push_back({atMs, delayMs});
    }
    if (series.m_steps.empty())
    {
        throw TraceFileError(origin + ": no rows (expected 'time_ms,delay_ms' and a row at 0 ms)");
    }
    return series;
}

DelaySeries
DelaySeries::Load(const std::string& path, uint64_t periodMs)
{
    return Parse(ReadFile(path), path, periodMs);
}

double
DelaySeries::DelayMsAt(double ms) const
{
    double position = std::fmod(std::max(ms, 0.0), static_cast<double>(m_periodMs));
    auto after = std::upper_bound(m_steps.begin(), m_steps.end(), position,
                                  [](double wanted, const Step& step) { return wanted < static_cast<double>(step.atMs); });
    return std::prev(after)->delayMs;
}

} // namespace mptund
