// The trace-driven link's NetDevice/Channel pair (see link_trace.cc for the
// semantics and why it is a device): declared here so that
// test/trace_device_test.cc can drive it in a plain (not real-time) simulation.
#ifndef MPTUND_NS3_TRACE_DEVICE_H
#define MPTUND_NS3_TRACE_DEVICE_H

#include "trace_file.h"

#include "ns3/channel.h"
#include "ns3/drop-tail-queue.h"
#include "ns3/mac48-address.h"
#include "ns3/net-device.h"
#include "ns3/node.h"
#include "ns3/nstime.h"

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mptund
{

/// What one direction replays and what it did.
struct TraceDirection
{
    std::string name;       ///< "up" (access -> core) or "down" (core -> access)
    std::string tracePath;
    std::string delaysPath; ///< "" = constant `baseDelay`
    DeliveryTrace trace;
    std::optional<DelaySeries> delays;
    ns3::Time baseDelay;
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
class TraceLinkDevice : public ns3::NetDevice
{
  public:
    static ns3::TypeId GetTypeId();

    TraceLinkDevice(std::shared_ptr<TraceDirection> direction, ns3::Ptr<TraceLinkChannel> channel);

    /// The channel hands over a packet whose delay has passed.
    void Receive(ns3::Ptr<ns3::Packet> packet, ns3::Address from);

    // NetDevice ------------------------------------------------------------------
    void SetIfIndex(const uint32_t index) override { m_ifIndex = index; }
    uint32_t GetIfIndex() const override { return m_ifIndex; }
    ns3::Ptr<ns3::Channel> GetChannel() const override;
    void SetAddress(ns3::Address address) override { m_address = ns3::Mac48Address::ConvertFrom(address); }
    ns3::Address GetAddress() const override { return m_address; }
    bool SetMtu(const uint16_t mtu) override
    {
        m_mtu = mtu;
        return true;
    }
    uint16_t GetMtu() const override { return m_mtu; }
    bool IsLinkUp() const override { return true; }
    void AddLinkChangeCallback(ns3::Callback<void> /*callback*/) override {}
    bool IsBroadcast() const override { return true; }
    ns3::Address GetBroadcast() const override { return ns3::Mac48Address::GetBroadcast(); }
    bool IsMulticast() const override { return true; }
    ns3::Address GetMulticast(ns3::Ipv4Address group) const override { return ns3::Mac48Address::GetMulticast(group); }
    ns3::Address GetMulticast(ns3::Ipv6Address group) const override { return ns3::Mac48Address::GetMulticast(group); }
    bool IsBridge() const override { return false; }
    bool IsPointToPoint() const override { return true; }
    bool Send(ns3::Ptr<ns3::Packet> packet, const ns3::Address& dest, uint16_t protocol) override;
    bool SendFrom(ns3::Ptr<ns3::Packet> packet, const ns3::Address& /*source*/, const ns3::Address& dest,
                  uint16_t protocol) override
    {
        return Send(packet, dest, protocol);
    }
    ns3::Ptr<ns3::Node> GetNode() const override { return m_node; }
    void SetNode(ns3::Ptr<ns3::Node> node) override { m_node = node; }
    bool NeedsArp() const override { return false; }
    void SetReceiveCallback(ReceiveCallback callback) override { m_rx = callback; }
    void SetPromiscReceiveCallback(PromiscReceiveCallback callback) override { m_promiscRx = callback; }
    bool SupportsSendFrom() const override { return false; }

  protected:
    void DoDispose() override;

  private:
    /// Schedule the next opportunity this queue can use; the ones that passed
    /// while it was empty are gone.
    void ScheduleNextOpportunity();
    /// Every opportunity due now carries up to its bytes from the queue's head.
    void UseOpportunities();
    /// The packet's last byte went out now: it arrives after the delay in force.
    void Transmit(ns3::Ptr<ns3::Packet> packet);

    std::shared_ptr<TraceDirection> m_direction;
    ns3::Ptr<TraceLinkChannel> m_channel;
    ns3::Ptr<ns3::Node> m_node;
    ns3::Mac48Address m_address;
    uint32_t m_ifIndex = 0;
    uint16_t m_mtu = 1500; // the IP MTU of every simulated hop (README, MTU)
    ReceiveCallback m_rx;
    PromiscReceiveCallback m_promiscRx;
    ns3::Ptr<ns3::DropTailQueue<ns3::Packet>> m_queue;
    uint64_t m_nextOpportunity = 0; ///< global index of the next unused opportunity
    uint32_t m_headBytesSent = 0;   ///< bytes of the head packet already carried
    ns3::Time m_lastArrival;        ///< keeps delivery in order when the delay shrinks
    ns3::EventId m_opportunity;
};

/// Joins the two TraceLinkDevices; carries a packet after its delay.
class TraceLinkChannel : public ns3::Channel
{
  public:
    static ns3::TypeId GetTypeId();

    void Attach(ns3::Ptr<TraceLinkDevice> device) { m_devices.push_back(device); }
    void Deliver(ns3::Ptr<TraceLinkDevice> sender, ns3::Ptr<ns3::Packet> packet, ns3::Time delay);

    std::size_t GetNDevices() const override { return m_devices.size(); }
    ns3::Ptr<ns3::NetDevice> GetDevice(std::size_t i) const override { return m_devices[i]; }

  protected:
    void DoDispose() override;

  private:
    std::vector<ns3::Ptr<TraceLinkDevice>> m_devices;
};

/// Joins `a` and `b` by a new trace link: `a` transmits `fromA`, `b` transmits
/// `fromB`. Each device is added to its node; returns (a's device, b's device).
std::pair<ns3::Ptr<TraceLinkDevice>, ns3::Ptr<TraceLinkDevice>> InstallTraceLink(
    ns3::Ptr<ns3::Node> a, std::shared_ptr<TraceDirection> fromA, ns3::Ptr<ns3::Node> b,
    std::shared_ptr<TraceDirection> fromB);

} // namespace mptund

#endif
