// Tests of the trace-driven link's file parsers (src/trace_file.cc), without
// ns-3: `make test` builds and runs them. Exits non-zero on the first failure.
#include "../src/trace_file.h"

#include <cmath>
#include <functional>
#include <iostream>
#include <string>

using namespace mptund;

namespace
{

int g_failures = 0;

void
Check(bool condition, const std::string& what)
{
    if (!condition)
    {
        std::cerr << "FAIL: " << what << "\n";
        ++g_failures;
    }
}

/// The parser rejects `text` with a message that contains `expected`.
void
CheckRejects(const std::function<void()>& parse, const std::string& expected, const std::string& what)
{
    try
    {
        parse();
        Check(false, what + ": accepted");
    }
    catch (const TraceFileError& error)
    {
        Check(std::string(error.what()).find(expected) != std::string::npos,
              what + ": message '" + error.what() + "' lacks '" + expected + "'");
    }
}

void
MahimahiOpportunitiesLoopWithTheLastTimestampAsPeriod()
{
    // Two opportunities at 1 ms, one at 4, one at 10: period 10 ms.
    DeliveryTrace trace = DeliveryTrace::Parse("1\n1\n4\n\n10\n", "t");
    Check(trace.Count() == 4, "count");
    Check(trace.PeriodMs() == 10, "period");
    Check(trace.OpportunityMs(0) == 1 && trace.OpportunityMs(1) == 1 && trace.OpportunityMs(3) == 10,
          "first period");
    Check(trace.OpportunityMs(4) == 11 && trace.OpportunityMs(7) == 20, "second period");
    // 4 x 1500 bytes every 10 ms = 4.8 Mbit/s; a scaled opportunity carries fewer bytes.
    Check(std::abs(trace.MeanBitPerS(1500) - 4.8e6) < 1, "mean rate");
    Check(std::abs(trace.MeanBitPerS(150) - 0.48e6) < 1, "scaled mean rate");
}

void
OpportunityLookupIsAtOrAfterAndCountsHalfOpenIntervals()
{
    DeliveryTrace trace = DeliveryTrace::Parse("1\n1\n4\n10\n", "t");
    Check(trace.FirstIndexAtOrAfterMs(0) == 0, "at 0");
    Check(trace.FirstIndexAtOrAfterMs(1) == 0, "at 1 ms: both opportunities of 1 ms");
    Check(trace.FirstIndexAtOrAfterMs(1.5) == 2, "between 1 and 4 ms");
    Check(trace.FirstIndexAtOrAfterMs(10) == 3, "at the period: its last opportunity is still ahead");
    Check(trace.FirstIndexAtOrAfterMs(10.2) == 4, "just after the period");
    Check(trace.FirstIndexAtOrAfterMs(21) == 8, "two periods on");
    Check(trace.CountBetweenMs(0, 10) == 3, "[0, 10) leaves out the opportunity at 10");
    Check(trace.CountBetweenMs(0, 10.5) == 4, "[0, 10.5)");
    Check(trace.CountBetweenMs(0, 1000) == 399, "[0, 1 s): 100 periods but the one at 1000 ms");
    Check(trace.CountBetweenMs(0, 1000.5) == 400, "[0, 1000.5 ms): 100 whole periods");
    Check(trace.CountBetweenMs(5, 5) == 0, "empty interval");
}

void
MahimahiErrorsNameTheLineAndTheFix()
{
    CheckRejects([] { DeliveryTrace::Parse("3\nx\n", "a.mahi"); }, "a.mahi:2: 'x' is not a millisecond", "text");
    CheckRejects([] { DeliveryTrace::Parse("3\n-4\n", "a.mahi"); }, "a.mahi:2:", "negative");
    CheckRejects([] { DeliveryTrace::Parse("3\n2.5\n", "a.mahi"); }, "a.mahi:2:", "fraction");
    CheckRejects([] { DeliveryTrace::Parse("5\n3\n", "a.mahi"); }, "a.mahi:2: time goes backwards", "backwards");
    CheckRejects([] { DeliveryTrace::Parse("\n\n", "a.mahi"); }, "no timestamps", "empty");
    CheckRejects([] { DeliveryTrace::Parse("0\n0\n", "a.mahi"); }, "loop period", "zero period");
    CheckRejects([] { DeliveryTrace::Load("/nonexistent/trace.mahi"); }, "cannot open", "missing file");
}

void
DelaySeriesHoldsEachRowUntilTheNextAndLoops()
{
    DelaySeries series = DelaySeries::Parse("# one slot change\ntime_ms,delay_ms\n0,20\n150,35.5\n", "d", 300);
    Check(series.Steps().size() == 2, "rows");
    Check(series.DelayMsAt(0) == 20 && series.DelayMsAt(149.9) == 20, "first row holds");
    Check(series.DelayMsAt(150) == 35.5 && series.DelayMsAt(299) == 35.5, "second row holds");
    Check(series.DelayMsAt(300) == 20 && series.DelayMsAt(460) == 35.5, "loops with the period");
}

void
DelaySeriesErrorsNameTheLineAndTheFix()
{
    CheckRejects([] { DelaySeries::Parse("t,d\n0,1\n", "d.csv", 100); }, "d.csv:1: expected the header", "header");
    CheckRejects([] { DelaySeries::Parse("time_ms,delay_ms\n5,1\n", "d.csv", 100); }, "d.csv:2: the first row",
                 "first row not at 0");
    CheckRejects([] { DelaySeries::Parse("time_ms,delay_ms\n0,1\n0,2\n", "d.csv", 100); }, "d.csv:3:",
                 "time not increasing");
    CheckRejects([] { DelaySeries::Parse("time_ms,delay_ms\n0,1\n100,2\n", "d.csv", 100); }, "period (100 ms)",
                 "row at the period");
    CheckRejects([] { DelaySeries::Parse("time_ms,delay_ms\n0,-1\n", "d.csv", 100); }, "d.csv:2: delay_ms '-1'",
                 "negative delay");
    CheckRejects([] { DelaySeries::Parse("time_ms,delay_ms\n0,5ms\n", "d.csv", 100); }, "delay_ms '5ms'", "unit");
    CheckRejects([] { DelaySeries::Parse("time_ms,delay_ms\n0,1,2\n", "d.csv", 100); }, "two fields", "three fields");
    CheckRejects([] { DelaySeries::Parse("time_ms,delay_ms\n", "d.csv", 100); }, "no rows", "no rows");
}

} // namespace

int
main()
{
    MahimahiOpportunitiesLoopWithTheLastTimestampAsPeriod();
    OpportunityLookupIsAtOrAfterAndCountsHalfOpenIntervals();
    MahimahiErrorsNameTheLineAndTheFix();
    DelaySeriesHoldsEachRowUntilTheNextAndLoops();
    DelaySeriesErrorsNameTheLineAndTheFix();
    if (g_failures)
    {
        std::cerr << g_failures << " check(s) failed\n";
        return 1;
    }
    std::cout << "trace_file_test: all checks passed\n";
    return 0;
}
