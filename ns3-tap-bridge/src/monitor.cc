#include "monitor.h"

#include "ns3/realtime-simulator-impl.h"

#include <algorithm>
#include <numeric>

using namespace ns3;

namespace mptund
{

namespace
{

const Ipv4Mask kClientMask("255.255.255.0");

// Only UDP counts: the daemons' datagrams. The client kernel's ICMP errors
// (e.g. port unreachable once the client daemon has exited) take the main
// routing table's preferred uplink whatever their source address, so the
// source would attribute them to the wrong link.
const uint8_t kUdp = 17;

void
Count(DirectionCounters& counters, bool delivered, const Ipv4Header& header)
{
    uint64_t bytes = header.GetSerializedSize() + header.GetPayloadSize();
    if (!delivered)
    {
        counters.offeredPackets++;
        counters.offeredBytes += bytes;
        return;
    }
    double now = Simulator::Now().GetSeconds();
    counters.deliveredPackets++;
    counters.deliveredBytes += bytes;
    if (counters.firstDeliveredS < 0)
    {
        counters.firstDeliveredS = now;
    }
    counters.lastDeliveredS = now;
    size_t second = static_cast<size_t>(now);
    if (counters.deliveredBytesPerSecond.size() <= second)
    {
        counters.deliveredBytesPerSecond.resize(second + 1, 0);
    }
    counters.deliveredBytesPerSecond[second] += bytes;
}

} // namespace

void
LinkCounterSet::AddLink(uint32_t index, const std::string& name, Ptr<Node> accessRouter)
{
    uint32_t slot = m_links.size();
    m_links.push_back(LinkCounters{name, {}, {}});
    m_indexes.push_back(index);
    accessRouter->GetObject<Ipv4L3Protocol>()->TraceConnectWithoutContext(
        "UnicastForward", MakeCallback(&LinkCounterSet::OnAccessForward, this).Bind(slot));
}

void
LinkCounterSet::WatchCore(Ptr<Node> coreRouter)
{
    coreRouter->GetObject<Ipv4L3Protocol>()->TraceConnectWithoutContext(
        "UnicastForward", MakeCallback(&LinkCounterSet::OnCoreForward, this));
}

const std::vector<LinkCounters>&
LinkCounterSet::Links() const
{
    return m_links;
}

int
LinkCounterSet::SlotOf(Ipv4Address address) const
{
    for (uint32_t slot = 0; slot < m_indexes.size(); ++slot)
    {
        Ipv4Address subnet(Ipv4Address("198.18.0.0").Get() | (m_indexes[slot] << 8));
        // .1 is the access router itself: what it originates (ICMP errors to
        // the server) did not cross the client's LAN and is not path traffic.
        Ipv4Address gateway(subnet.Get() | 1);
        if (kClientMask.IsMatch(address, subnet) && address != gateway)
        {
            return slot;
        }
    }
    return -1;
}

void
LinkCounterSet::OnAccessForward(uint32_t slot, const Ipv4Header& header, Ptr<const Packet>, uint32_t)
{
    if (header.GetProtocol() != kUdp)
    {
        return;
    }
    if (SlotOf(header.GetSource()) == static_cast<int>(slot))
    {
        Count(m_links[slot].up, false, header);
    }
    else if (SlotOf(header.GetDestination()) == static_cast<int>(slot))
    {
        Count(m_links[slot].down, true, header);
    }
}

void
LinkCounterSet::OnCoreForward(const Ipv4Header& header, Ptr<const Packet>, uint32_t)
{
    if (header.GetProtocol() != kUdp)
    {
        return;
    }
    if (int slot = SlotOf(header.GetSource()); slot >= 0)
    {
        Count(m_links[slot].up, true, header);
    }
    else if (int slot = SlotOf(header.GetDestination()); slot >= 0)
    {
        Count(m_links[slot].down, false, header);
    }
}

volatile std::sig_atomic_t RealtimeMonitor::s_stopRequested = 0;

RealtimeMonitor::RealtimeMonitor(Time interval, Time warmup, double toleranceMs)
    : m_interval(interval),
      m_warmup(warmup),
      m_toleranceMs(toleranceMs)
{
}

void
RealtimeMonitor::Start()
{
    Simulator::Schedule(m_interval, &RealtimeMonitor::Sample, this);
}

void
RealtimeMonitor::Sample()
{
    Ptr<RealtimeSimulatorImpl> impl = DynamicCast<RealtimeSimulatorImpl>(Simulator::GetImplementation());
    double lagMs = (impl->RealtimeNow() - Simulator::Now()).GetSeconds() * 1000.0;
    size_t second = static_cast<size_t>(Simulator::Now().GetSeconds());
    if (m_maxLagPerSecondMs.size() <= second)
    {
        m_maxLagPerSecondMs.resize(second + 1, 0.0);
    }
    m_maxLagPerSecondMs[second] = std::max(m_maxLagPerSecondMs[second], lagMs);
    if (Simulator::Now() < m_warmup)
    {
        m_startupMaxLagMs = std::max(m_startupMaxLagMs, lagMs);
    }
    else
    {
        if (m_lagMs.empty() || lagMs > MaxLagMs())
        {
            m_maxLagAtS = Simulator::Now().GetSeconds();
        }
        m_lagMs.push_back(lagMs);
    }
    if (s_stopRequested)
    {
        Simulator::Stop();
        return;
    }
    Simulator::Schedule(m_interval, &RealtimeMonitor::Sample, this);
}

double
RealtimeMonitor::MaxLagMs() const
{
    return m_lagMs.empty() ? 0.0 : *std::max_element(m_lagMs.begin(), m_lagMs.end());
}

bool
RealtimeMonitor::KeptUp() const
{
    return MaxLagMs() <= m_toleranceMs;
}

void
RealtimeMonitor::WriteJson(std::ostream& out) const
{
    std::vector<double> sorted = m_lagMs;
    std::sort(sorted.begin(), sorted.end());
    auto percentile = [&sorted](double q) {
        return sorted.empty() ? 0.0 : sorted[std::min(sorted.size() - 1, size_t(q * sorted.size()))];
    };
    double mean = sorted.empty() ? 0.0 : std::accumulate(sorted.begin(), sorted.end(), 0.0) / sorted.size();
    size_t late = std::count_if(sorted.begin(), sorted.end(), [this](double lag) { return lag > m_toleranceMs; });
    out << "{\"samples\": " << sorted.size() << ", \"interval_ms\": " << m_interval.GetMilliSeconds()
        << ", \"max_ms\": " << MaxLagMs() << ", \"max_at_s\": " << m_maxLagAtS << ", \"mean_ms\": " << mean
        << ", \"p50_ms\": " << percentile(0.5) << ", \"p99_ms\": " << percentile(0.99) << ", \"p999_ms\": " << percentile(0.999)
        << ", \"tolerance_ms\": " << m_toleranceMs << ", \"samples_over_tolerance\": " << late
        << ", \"warmup_s\": " << m_warmup.GetSeconds() << ", \"startup_max_ms\": " << m_startupMaxLagMs
        << ", \"kept_up\": " << (KeptUp() ? "true" : "false") << ", \"max_ms_per_s\": [";
    for (size_t second = 0; second < m_maxLagPerSecondMs.size(); ++second)
    {
        out << (second ? ", " : "") << m_maxLagPerSecondMs[second];
    }
    out << "]}";
}

} // namespace mptund
