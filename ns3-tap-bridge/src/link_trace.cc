// Trace-driven link: the access router is joined to the core router by a pair
// of TraceLinkDevices on a TraceLinkChannel that replay measured (or
// measurement-derived) Mahimahi packet-delivery traces, one per direction, with
// a one-way delay (constant, or a delay series) and a drop-tail queue.
//
// Semantics are Mahimahi's (and linkem's, crates/linkem/src/link.rs): each line
// of a trace is one delivery opportunity of 1500 bytes (times --traceRateScale,
// as linkem's rate_scale); an opportunity carries the head of the queue up to
// that many bytes, a packet larger than what is left continues in the next
// opportunity, and bytes of an opportunity that finds the queue empty are lost.
// Opportunity times count from simulated time 0 and the trace loops with its
// last timestamp as period. After its last byte went out a packet propagates
// for the delay in force at that moment; delivery order is kept (a shrinking
// delay never lets a packet overtake the one before, as on a real link).
//
// Why a NetDevice/Channel pair rather than a queue disc: a queue disc is pulled
// by its device whenever the device has room, so releasing packets at given
// instants would need the device stopped and woken from outside; a device that
// owns its queue and serialises at the trace's opportunities is what
// PointToPointNetDevice is for a constant rate. No queue disc is installed in
// front of it (addresses are assigned by hand, not by Ipv4AddressHelper, which
// would add the default FqCoDel): the drop-tail queue here is the only buffer.
#include "scenario.h"
#include "trace_file.h"

#include "ns3/channel.h"
#include "ns3/drop-tail-queue.h"
#include "ns3/mac48-address.h"
#include "ns3/net-device.h"

#include <algorithm>
#include <iomanip>
#include <memory>
#include <optional>
#include <sstream>

using namespace ns3;

namespace mptund
{

namespace
{

/// Carries the packet's protocol number across the channel (a point-to-point
/// device adds a PPP header instead; a tag costs no bytes of the opportunity,
/// so an opportunity carries the IP packet as Mahimahi's does).
class TraceLinkProtocolTag : public Tag
{
  public:
    static TypeId GetTypeId()
    {
        static TypeId tid = TypeId("mptund::TraceLinkProtocolTag").SetParent<Tag>().AddConstructor<TraceLinkProtocolTag>();
        return tid;
    }

    TypeId GetInstanceTypeId() const override { return GetTypeId(); }
    uint32_t GetSerializedSize() const override { return 2; }
    void Serialize(TagBuffer buffer) const override { buffer.WriteU16(protocol); }
    void Deserialize(TagBuffer buffer) override { protocol = buffer.ReadU16(); }
    void Print(std::ostream& out) const override { out << "protocol=" << protocol; }

    uint16_t protocol = 0;
};

/// What one direction replays and what it did.
struct TraceDirection
{
    std::string name;         ///< "up" (access -> core) or "down" (core -> access)
    std::string tracePath;
    std::string delaysPath;   ///< "" = constant `baseDelay`
    DeliveryTrace trace;
    std::optional<DelaySeries> delays;
    Time baseDelay;
    uint32_t bytesPerOpportunity = kMahimahiOpportunityBytes;
    uint32_t queueLimitBytes = 0;

    uint64_t opportunitiesUsed = 0; ///< carried at least one byte
    uint64_t sentPackets = 0;       ///< whole packets out of the queue onto the channel
    uint64_t sentBytes = 0;
    uint64_t droppedPackets = 0;    ///< queue full on arrival
    uint64_t droppedBytes = 0;
    uint32_t maxQueueBytes = 0;
};

class TraceLinkChannel;

/// One end of the trace-driven link: transmits its direction's trace.
class TraceLinkDevice : public NetDevice
{
  public:
    static TypeId GetTypeId()
    {
        static TypeId tid = TypeId("mptund::TraceLinkDevice").SetParent<NetDevice>();
        return tid;
    }

    TraceLinkDevice(std::shared_ptr<TraceDirection> direction, Ptr<TraceLinkChannel> channel)
        : m_direction(std::move(direction)),
          m_channel(channel),
          m_address(Mac48Address::Allocate())
    {
        m_queue = CreateObject<DropTailQueue<Packet>>();
        m_queue->SetMaxSize(QueueSize(QueueSizeUnit::BYTES, m_direction->queueLimitBytes));
    }

    /// The channel hands over a packet whose delay has passed.
    void Receive(Ptr<Packet> packet, Address from)
    {
        TraceLinkProtocolTag tag;
        packet->RemovePacketTag(tag);
        if (!m_promiscRx.IsNull())
        {
            m_promiscRx(this, packet, tag.protocol, from, m_address, NetDevice::PACKET_HOST);
        }
        m_rx(this, packet, tag.protocol, from);
    }

    // NetDevice ------------------------------------------------------------------
    void SetIfIndex(const uint32_t index) override { m_ifIndex = index; }
    uint32_t GetIfIndex() const override { return m_ifIndex; }
    Ptr<Channel> GetChannel() const override;
    void SetAddress(Address address) override { m_address = Mac48Address::ConvertFrom(address); }
    Address GetAddress() const override { return m_address; }
    bool SetMtu(const uint16_t mtu) override
    {
        m_mtu = mtu;
        return true;
    }
    uint16_t GetMtu() const override { return m_mtu; }
    bool IsLinkUp() const override { return true; }
    void AddLinkChangeCallback(Callback<void> /*callback*/) override {}
    bool IsBroadcast() const override { return true; }
    Address GetBroadcast() const override { return Mac48Address::GetBroadcast(); }
    bool IsMulticast() const override { return true; }
    Address GetMulticast(Ipv4Address group) const override { return Mac48Address::GetMulticast(group); }
    Address GetMulticast(Ipv6Address group) const override { return Mac48Address::GetMulticast(group); }
    bool IsBridge() const override { return false; }
    bool IsPointToPoint() const override { return true; }
    bool Send(Ptr<Packet> packet, const Address& /*dest*/, uint16_t protocol) override;
    bool SendFrom(Ptr<Packet> packet, const Address& /*source*/, const Address& dest, uint16_t protocol) override
    {
        return Send(packet, dest, protocol);
    }
    Ptr<Node> GetNode() const override { return m_node; }
    void SetNode(Ptr<Node> node) override { m_node = node; }
    bool NeedsArp() const override { return false; }
    void SetReceiveCallback(ReceiveCallback callback) override { m_rx = callback; }
    void SetPromiscReceiveCallback(PromiscReceiveCallback callback) override { m_promiscRx = callback; }
    bool SupportsSendFrom() const override { return false; }

  protected:
    void DoDispose() override
    {
        m_opportunity.Cancel();
        m_node = nullptr;
        m_channel = nullptr;
        m_queue = nullptr;
        m_rx = MakeNullCallback<bool, Ptr<NetDevice>, Ptr<const Packet>, uint16_t, const Address&>();
        m_promiscRx = MakeNullCallback<bool, Ptr<NetDevice>, Ptr<const Packet>, uint16_t, const Address&,
                                       const Address&, NetDevice::PacketType>();
        NetDevice::DoDispose();
    }

  private:
    static double NowMs() { return Simulator::Now().GetNanoSeconds() / 1e6; }

    /// Schedule the next opportunity this queue can use; the ones that passed
    /// while it was empty are gone.
    void ScheduleNextOpportunity()
    {
        const DeliveryTrace& trace = m_direction->trace;
        m_nextOpportunity = std::max(m_nextOpportunity, trace.FirstIndexAtOrAfterMs(NowMs()));
        Time at = MilliSeconds(trace.OpportunityMs(m_nextOpportunity));
        m_opportunity = Simulator::Schedule(at - Simulator::Now(), &TraceLinkDevice::UseOpportunities, this);
    }

    /// Every opportunity due now carries up to its bytes from the queue's head.
    void UseOpportunities();

    /// The packet's last byte went out now: it arrives after the delay in force.
    void Transmit(Ptr<Packet> packet);

    std::shared_ptr<TraceDirection> m_direction;
    Ptr<TraceLinkChannel> m_channel;
    Ptr<Node> m_node;
    Mac48Address m_address;
    uint32_t m_ifIndex = 0;
    uint16_t m_mtu = 1500; // the IP MTU of every simulated hop (README, MTU)
    ReceiveCallback m_rx;
    PromiscReceiveCallback m_promiscRx;
    Ptr<DropTailQueue<Packet>> m_queue;
    uint64_t m_nextOpportunity = 0; ///< global index of the next unused opportunity
    uint32_t m_headBytesSent = 0;   ///< bytes of the head packet already carried
    Time m_lastArrival;             ///< keeps delivery in order when the delay shrinks
    EventId m_opportunity;
};

/// Joins the two TraceLinkDevices; carries a packet after its delay.
class TraceLinkChannel : public Channel
{
  public:
    static TypeId GetTypeId()
    {
        static TypeId tid = TypeId("mptund::TraceLinkChannel").SetParent<Channel>();
        return tid;
    }

    void Attach(Ptr<TraceLinkDevice> device) { m_devices.push_back(device); }

    void Deliver(Ptr<TraceLinkDevice> sender, Ptr<Packet> packet, Time delay)
    {
        Ptr<TraceLinkDevice> receiver = m_devices[0] == sender ? m_devices[1] : m_devices[0];
        Simulator::ScheduleWithContext(receiver->GetNode()->GetId(), delay, &TraceLinkDevice::Receive, receiver,
                                       packet, sender->GetAddress());
    }

    std::size_t GetNDevices() const override { return m_devices.size(); }
    Ptr<NetDevice> GetDevice(std::size_t i) const override { return m_devices[i]; }

  protected:
    void DoDispose() override
    {
        m_devices.clear();
        Channel::DoDispose();
    }

  private:
    std::vector<Ptr<TraceLinkDevice>> m_devices;
};

Ptr<Channel>
TraceLinkDevice::GetChannel() const
{
    return m_channel;
}

bool
TraceLinkDevice::Send(Ptr<Packet> packet, const Address& /*dest*/, uint16_t protocol)
{
    TraceLinkProtocolTag tag;
    tag.protocol = protocol;
    packet->AddPacketTag(tag);
    uint32_t size = packet->GetSize();
    if (!m_queue->Enqueue(packet))
    {
        ++m_direction->droppedPackets;
        m_direction->droppedBytes += size;
        return false;
    }
    m_direction->maxQueueBytes = std::max(m_direction->maxQueueBytes, m_queue->GetNBytes());
    if (!m_opportunity.IsRunning())
    {
        ScheduleNextOpportunity();
    }
    return true;
}

void
TraceLinkDevice::UseOpportunities()
{
    const DeliveryTrace& trace = m_direction->trace;
    while (!m_queue->IsEmpty() && MilliSeconds(trace.OpportunityMs(m_nextOpportunity)) <= Simulator::Now())
    {
        ++m_nextOpportunity;
        ++m_direction->opportunitiesUsed;
        uint32_t budget = m_direction->bytesPerOpportunity;
        while (budget > 0 && !m_queue->IsEmpty())
        {
            uint32_t size = m_queue->Peek()->GetSize();
            uint32_t carried = std::min(size - m_headBytesSent, budget);
            budget -= carried;
            m_headBytesSent += carried;
            if (m_headBytesSent == size)
            {
                m_headBytesSent = 0;
                Transmit(m_queue->Dequeue());
            }
        }
        // Whatever is left of `budget` is lost: Mahimahi does not bank unused bytes.
    }
    if (!m_queue->IsEmpty())
    {
        ScheduleNextOpportunity();
    }
}

void
TraceLinkDevice::Transmit(Ptr<Packet> packet)
{
    ++m_direction->sentPackets;
    m_direction->sentBytes += packet->GetSize();
    Time delay = m_direction->delays ? Time::FromDouble(m_direction->delays->DelayMsAt(NowMs()), Time::MS)
                                     : m_direction->baseDelay;
    Time arrival = std::max(Simulator::Now() + delay, m_lastArrival);
    m_lastArrival = arrival;
    m_channel->Deliver(this, packet, arrival - Simulator::Now());
}

/// Every trace link of the run, for the report.
struct TraceLinkRecord
{
    std::string name;
    std::shared_ptr<TraceDirection> up;
    std::shared_ptr<TraceDirection> down;
};

std::vector<TraceLinkRecord> g_traceLinks;

std::shared_ptr<TraceDirection>
LoadDirection(const std::string& name, const std::string& tracePath, const std::string& delaysPath,
              const Params& p)
{
    auto direction = std::make_shared<TraceDirection>();
    direction->name = name;
    direction->tracePath = tracePath;
    direction->delaysPath = delaysPath;
    direction->trace = DeliveryTrace::Load(tracePath);
    if (!delaysPath.empty())
    {
        direction->delays = DelaySeries::Load(delaysPath, direction->trace.PeriodMs());
    }
    direction->baseDelay = Time(p.traceDelay);
    // linkem's rate_scale: an opportunity carries fewer (or more) bytes, at the same instants.
    direction->bytesPerOpportunity =
        std::max<uint32_t>(1, static_cast<uint32_t>(std::lround(kMahimahiOpportunityBytes * p.traceRateScale)));
    double meanBytesPerS = direction->trace.MeanBitPerS(direction->bytesPerOpportunity) / 8;
    // At least one full-size packet, or nothing could ever be queued.
    direction->queueLimitBytes = std::max<uint32_t>(1500, static_cast<uint32_t>(meanBytesPerS * p.traceQueueMs / 1000));
    return direction;
}

void
WriteDirectionJson(std::ostream& out, const TraceDirection& d, double simulatedS)
{
    out << "{\"trace\": \"" << d.tracePath << "\", \"delays\": \"" << d.delaysPath
        << "\", \"opportunities_per_period\": " << d.trace.Count() << ", \"period_ms\": " << d.trace.PeriodMs()
        << ", \"bytes_per_opportunity\": " << d.bytesPerOpportunity
        << ", \"mean_mbit\": " << d.trace.MeanBitPerS(d.bytesPerOpportunity) / 1e6
        << ", \"base_delay_ms\": " << d.baseDelay.GetSeconds() * 1000 << ", \"queue_limit_bytes\": " << d.queueLimitBytes
        << ", \"max_queue_bytes\": " << d.maxQueueBytes << ", \"opportunities_used\": " << d.opportunitiesUsed
        << ", \"sent_packets\": " << d.sentPackets << ", \"sent_bytes\": " << d.sentBytes
        << ", \"dropped_packets\": " << d.droppedPackets << ", \"dropped_bytes\": " << d.droppedBytes
        << ", \"capacity_bytes_per_s\": [";
    // What the trace offered in each simulated second of the run, so the runner can
    // set a path's throughput against the capacity of its own transfer's window.
    auto seconds = static_cast<uint64_t>(std::ceil(simulatedS));
    for (uint64_t s = 0; s < seconds; ++s)
    {
        out << (s ? ", " : "")
            << d.trace.CountBetweenMs(s * 1000.0, (s + 1) * 1000.0) * static_cast<uint64_t>(d.bytesPerOpportunity);
    }
    out << "]}";
}

} // namespace

void
BuildTraceLink(LinkContext& ctx)
{
    const Params& p = ctx.params;
    if (p.traceDown.empty() || p.traceUp.empty())
    {
        throw TraceFileError("--traceDown and --traceUp: the trace link needs a Mahimahi trace per direction, e.g. "
                             "--traceDown=traces/5g-midband-drive-down.mahi");
    }
    if (!(p.traceRateScale > 0) || !(p.traceQueueMs > 0))
    {
        throw TraceFileError("--traceRateScale and --traceQueueMs must be above 0");
    }
    auto up = LoadDirection("up", p.traceUp, p.traceUpDelays, p);
    auto down = LoadDirection("down", p.traceDown, p.traceDownDelays, p);

    Ptr<TraceLinkChannel> channel = CreateObject<TraceLinkChannel>();
    Ptr<TraceLinkDevice> accessDevice = CreateObject<TraceLinkDevice>(up, channel);
    Ptr<TraceLinkDevice> coreDevice = CreateObject<TraceLinkDevice>(down, channel);
    channel->Attach(accessDevice);
    channel->Attach(coreDevice);
    ctx.accessRouter->AddDevice(accessDevice);
    ctx.coreRouter->AddDevice(coreDevice);

    // Addresses by hand: Ipv4AddressHelper::Assign would put a queue disc in front (see top).
    Ipv4AddressHelper subnet = ctx.InternalSubnet(0);
    Ipv4Address addresses[2];
    Ptr<NetDevice> devices[2] = {accessDevice, coreDevice};
    for (int d = 0; d < 2; ++d)
    {
        Ptr<Ipv4> ipv4 = devices[d]->GetNode()->GetObject<Ipv4>();
        uint32_t interface = ipv4->AddInterface(devices[d]);
        addresses[d] = subnet.NewAddress();
        ipv4->AddAddress(interface, Ipv4InterfaceAddress(addresses[d], Ipv4Mask("255.255.255.0")));
        ipv4->SetUp(interface);
    }
    StaticRouting(ctx.accessRouter)->SetDefaultRoute(addresses[1], InterfaceOf(accessDevice));
    StaticRouting(ctx.coreRouter)->AddNetworkRouteTo(ctx.clientSubnet, ctx.clientMask, addresses[0], InterfaceOf(coreDevice));

    g_traceLinks.push_back({"trace", up, down});
    std::ostringstream text;
    text << std::fixed << std::setprecision(2) << "trace link: down " << p.traceDown << " (mean "
         << down->trace.MeanBitPerS(down->bytesPerOpportunity) / 1e6 << " Mbit/s), up " << p.traceUp << " (mean "
         << up->trace.MeanBitPerS(up->bytesPerOpportunity) / 1e6 << " Mbit/s), rate scale " << p.traceRateScale;
    Note(text.str());
}

void
WriteTraceLinksJson(std::ostream& out, double simulatedS)
{
    out << "{";
    for (size_t i = 0; i < g_traceLinks.size(); ++i)
    {
        const TraceLinkRecord& link = g_traceLinks[i];
        out << (i ? ", " : "") << "\"" << link.name << "\": {\"up\": ";
        WriteDirectionJson(out, *link.up, simulatedS);
        out << ", \"down\": ";
        WriteDirectionJson(out, *link.down, simulatedS);
        out << "}";
    }
    out << "}";
}

} // namespace mptund
