// What the simulator reports about itself: per-link traffic counters (measured
// at both ends of every link) and how far the simulation fell behind the wall
// clock.
#ifndef MPTUND_NS3_MONITOR_H
#define MPTUND_NS3_MONITOR_H

#include "scenario.h"

#include <csignal>
#include <ostream>
#include <vector>

namespace mptund
{

/// Counts the UDP datagrams forwarded by the routers at both ends of each link.
/// "Up" traffic comes from a client subnet, "down" traffic goes to one; the
/// access router sees up traffic enter the link and down traffic leave it,
/// the core router the other way round. Offered minus delivered is what the
/// link lost (queue overflow, radio errors, a lost association).
class LinkCounterSet
{
  public:
    /// Register link `index` (1-based, client subnet 198.18.<index>.0/24).
    void AddLink(uint32_t index, const std::string& name, ns3::Ptr<ns3::Node> accessRouter);
    /// Hook the core router once, after all links are added.
    void WatchCore(ns3::Ptr<ns3::Node> coreRouter);
    const std::vector<LinkCounters>& Links() const;

  private:
    void OnAccessForward(uint32_t slot, const ns3::Ipv4Header& header, ns3::Ptr<const ns3::Packet> packet, uint32_t);
    void OnCoreForward(const ns3::Ipv4Header& header, ns3::Ptr<const ns3::Packet> packet, uint32_t);
    int SlotOf(ns3::Ipv4Address address) const;

    std::vector<LinkCounters> m_links;
    std::vector<uint32_t> m_indexes; ///< path number of each slot
};

/// A periodic event that compares the wall clock with the simulation clock.
/// RealtimeSimulatorImpl runs an event no earlier than its wall-clock time; if
/// the CPU cannot keep up, events run late and the lag (wall - simulation)
/// grows. In BestEffort mode the simulation carries on behind real time (so
/// link delays and rates seen by real traffic are stretched); this probe makes
/// that visible. It also stops the simulation once a stop signal has arrived.
class RealtimeMonitor
{
  public:
    /// Samples before `warmup` (node initialisation, LTE attach) count only
    /// toward the separate start-up maximum, not toward KeptUp().
    RealtimeMonitor(ns3::Time interval, ns3::Time warmup, double toleranceMs);
    void Start();
    /// Set by the SIGTERM/SIGINT handler (async-signal-safe); read by the probe.
    static volatile std::sig_atomic_t s_stopRequested;

    double MaxLagMs() const;
    bool KeptUp() const;
    void WriteJson(std::ostream& out) const;

  private:
    void Sample();

    ns3::Time m_interval;
    ns3::Time m_warmup;
    double m_toleranceMs;
    double m_startupMaxLagMs = 0;
    std::vector<double> m_lagMs;
    double m_maxLagAtS = 0;
    /// Largest lag of each simulated second (start-up included): when a run fell
    /// behind, and whether it caught up or stayed behind.
    std::vector<double> m_maxLagPerSecondMs;
};

} // namespace mptund

#endif
