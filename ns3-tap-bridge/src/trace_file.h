// Trace files the trace-driven link replays, parsed without ns-3 so that the
// parser has its own test (test/trace_file_test.cc, `make test`).
//
// * Mahimahi packet-delivery trace (Netravali et al., "Mahimahi: Accurate
//   Record-and-Replay for HTTP", USENIX ATC 2015; the format testbed/ writes and
//   linkem replays): one integer per line, the millisecond at which one
//   MTU-sized (1500-byte) delivery opportunity occurs; equal lines are several
//   opportunities in that millisecond. The trace loops with its last timestamp
//   as period.
// * Delay series (this project's): a header `time_ms,delay_ms`, then one row
//   per step; a row's one-way delay holds from its time until the next row's.
//   The first row is at 0 ms. It loops with the period of the delivery trace it
//   goes with, so that rate and delay stay aligned as they were measured.
#ifndef MPTUND_NS3_TRACE_FILE_H
#define MPTUND_NS3_TRACE_FILE_H

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace mptund
{

/// A trace file that cannot be used; what() names the file, line and fix.
class TraceFileError : public std::runtime_error
{
  public:
    using std::runtime_error::runtime_error;
};

/// Bytes one Mahimahi delivery opportunity carries (its MTU-sized packet).
constexpr uint32_t kMahimahiOpportunityBytes = 1500;

/// A looping schedule of delivery opportunities.
class DeliveryTrace
{
  public:
    /// Parses Mahimahi text; `origin` (a file name) prefixes error messages.
    static DeliveryTrace Parse(const std::string& text, const std::string& origin);
    static DeliveryTrace Load(const std::string& path);

    /// Opportunities per period.
    uint64_t Count() const { return m_opportunitiesMs.size(); }
    uint64_t PeriodMs() const { return m_periodMs; }
    /// Time of the opportunity with global index `index` (the trace repeated), ms since start.
    uint64_t OpportunityMs(uint64_t index) const;
    /// Global index of the first opportunity at or after `ms` since start.
    uint64_t FirstIndexAtOrAfterMs(double ms) const;
    /// Opportunities in [fromMs, toMs) since start, the trace repeated.
    uint64_t CountBetweenMs(double fromMs, double toMs) const;
    /// Mean rate in bit/s when every opportunity carries `bytesPerOpportunity`.
    double MeanBitPerS(uint32_t bytesPerOpportunity) const;

  private:
    std::vector<uint64_t> m_opportunitiesMs; ///< within one period, non-decreasing
    uint64_t m_periodMs = 0;
};

/// A looping step series of one-way delay.
class DelaySeries
{
  public:
    struct Step
    {
        uint64_t atMs;
        double delayMs;
    };

    /// Parses the CSV; rows must lie before `periodMs`, the loop period.
    static DelaySeries Parse(const std::string& text, const std::string& origin, uint64_t periodMs);
    static DelaySeries Load(const std::string& path, uint64_t periodMs);

    /// The delay in force at `ms` since start.
    double DelayMsAt(double ms) const;
    const std::vector<Step>& Steps() const { return m_steps; }

  private:
    std::vector<Step> m_steps; ///< by time, the first at 0 ms
    uint64_t m_periodMs = 0;
};

} // namespace mptund

#endif
