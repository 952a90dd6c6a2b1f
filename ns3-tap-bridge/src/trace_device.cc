// The trace-driven link's device and channel (declared in trace_device.h; the
// semantics are described at the top of link_trace.cc).
#include "trace_device.h"

#include "ns3/simulator.h"
#include "ns3/tag.h"

#include <algorithm>

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
        static TypeId tid =
            TypeId("mptund::TraceLinkProtocolTag").SetParent<Tag>().AddConstructor<TraceLinkProtocolTag>();
        return tid;
    }

    TypeId GetInstanceTypeId() const override { return GetTypeId(); }
    uint32_t GetSerializedSize() const override { return 2; }
    void Serialize(TagBuffer buffer) const override { buffer.WriteU16(protocol); }
    void Deserialize(TagBuffer buffer) override { protocol = buffer.ReadU16(); }
    void Print(std::ostream& out) const override { out << "protocol=" << protocol; }

    uint16_t protocol = 0;
};

double
NowMs()
{
    return Simulator::Now().GetNanoSeconds() / 1e6;
}

} // namespace

TypeId
TraceLinkDevice::GetTypeId()
{
    static TypeId tid = TypeId("mptund::TraceLinkDevice").SetParent<NetDevice>();
    return tid;
}

TraceLinkDevice::TraceLinkDevice(std::shared_ptr<TraceDirection> direction, Ptr<TraceLinkChannel> channel)
    : m_direction(std::move(direction)),
      m_channel(channel),
      m_address(Mac48Address::Allocate())
{
    m_queue = CreateObject<DropTailQueue<Packet>>();
    m_queue->SetMaxSize(QueueSize(QueueSizeUnit::BYTES, m_direction->queueLimitBytes));
}

void
TraceLinkDevice::Receive(Ptr<Packet> packet, Address from)
{
    TraceLinkProtocolTag tag;
    packet->RemovePacketTag(tag);
    if (!m_promiscRx.IsNull())
    {
        m_promiscRx(this, packet, tag.protocol, from, m_address, NetDevice::PACKET_HOST);
    }
    if (!m_rx.IsNull())
    {
        m_rx(this, packet, tag.protocol, from);
    }
}

Ptr<Channel>
TraceLinkDevice::GetChannel() const
{
    return m_channel;
}

void
TraceLinkDevice::DoDispose()
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

void
TraceLinkDevice::ScheduleNextOpportunity()
{
    const DeliveryTrace& trace = m_direction->trace;
    m_nextOpportunity = std::max(m_nextOpportunity, trace.FirstIndexAtOrAfterMs(NowMs()));
    Time at = MilliSeconds(trace.OpportunityMs(m_nextOpportunity));
    m_opportunity = Simulator::Schedule(at - Simulator::Now(), &TraceLinkDevice::UseOpportunities, this);
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

TypeId
TraceLinkChannel::GetTypeId()
{
    static TypeId tid = TypeId("mptund::TraceLinkChannel").SetParent<Channel>();
    return tid;
}

void
TraceLinkChannel::Deliver(Ptr<TraceLinkDevice> sender, Ptr<Packet> packet, Time delay)
{
    Ptr<TraceLinkDevice> receiver = m_devices[0] == sender ? m_devices[1] : m_devices[0];
    Simulator::ScheduleWithContext(receiver->GetNode()->GetId(), delay, &TraceLinkDevice::Receive, receiver, packet,
                                   sender->GetAddress());
}

void
TraceLinkChannel::DoDispose()
{
    m_devices.clear();
    Channel::DoDispose();
}

std::pair<Ptr<TraceLinkDevice>, Ptr<TraceLinkDevice>>
InstallTraceLink(Ptr<Node> a, std::shared_ptr<TraceDirection> fromA, Ptr<Node> b,
                 std::shared_ptr<TraceDirection> fromB)
{
    Ptr<TraceLinkChannel> channel = CreateObject<TraceLinkChannel>();
    Ptr<TraceLinkDevice> deviceA = CreateObject<TraceLinkDevice>(std::move(fromA), channel);
    Ptr<TraceLinkDevice> deviceB = CreateObject<TraceLinkDevice>(std::move(fromB), channel);
    channel->Attach(deviceA);
    channel->Attach(deviceB);
    a->AddDevice(deviceA);
    b->AddDevice(deviceB);
    return {deviceA, deviceB};
}

} // namespace mptund
