// Tests of the trace-driven link's device (src/trace_device.cc) in a plain,
// not real-time, ns-3 simulation: when packets leave and arrive under
// Mahimahi's semantics. `make test` builds and runs them. Exits non-zero on
// the first failure.
#include "../src/trace_device.h"

#include "ns3/core-module.h"
#include "ns3/network-module.h"

#include <cmath>
#include <iostream>
#include <sstream>

using namespace mptund;
using namespace ns3;

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

constexpr uint16_t kIpv4 = 0x0800;

struct Arrival
{
    double ms;
    uint32_t size;
    uint16_t protocol;
};

/// One link between two bare nodes; packets are sent from `a` to `b`.
struct Bed
{
    std::shared_ptr<TraceDirection> fromA;
    Ptr<TraceLinkDevice> a;
    Ptr<TraceLinkDevice> b;
    std::vector<Arrival> arrivals;

    Bed(const std::string& trace, uint32_t bytesPerOpportunity, uint32_t queueLimitBytes, Time delay,
        const std::string& delays = "")
    {
        fromA = std::make_shared<TraceDirection>();
        fromA->trace = DeliveryTrace::Parse(trace, "test");
        if (!delays.empty())
        {
            fromA->delays = DelaySeries::Parse(delays, "test", fromA->trace.PeriodMs());
        }
        fromA->baseDelay = delay;
        fromA->bytesPerOpportunity = bytesPerOpportunity;
        fromA->queueLimitBytes = queueLimitBytes;
        auto fromB = std::make_shared<TraceDirection>(*fromA);
        std::tie(a, b) = InstallTraceLink(CreateObject<Node>(), fromA, CreateObject<Node>(), fromB);
        b->SetReceiveCallback(MakeCallback(&Bed::OnReceive, this));
    }

    bool OnReceive(Ptr<NetDevice>, Ptr<const Packet> packet, uint16_t protocol, const Address&)
    {
        arrivals.push_back({Simulator::Now().GetNanoSeconds() / 1e6, packet->GetSize(), protocol});
        return true;
    }

    void SendAt(double ms, uint32_t size)
    {
        Ptr<TraceLinkDevice> device = a;
        Simulator::Schedule(Time::FromDouble(ms, Time::MS),
                            [device, size]() { device->Send(Create<Packet>(size), device->GetBroadcast(), kIpv4); });
    }

    void Run()
    {
        Simulator::Stop(Seconds(10));
        Simulator::Run();
    }

    /// Arrival times (ms) and sizes, in order, e.g. "11:1500 12:1500".
    std::string Arrivals() const
    {
        std::ostringstream text;
        for (const Arrival& arrival : arrivals)
        {
            text << (text.tellp() ? " " : "") << arrival.ms << ":" << arrival.size;
        }
        return text.str();
    }

    ~Bed() { Simulator::Destroy(); }
};

void
CheckArrivals(const Bed& bed, const std::string& expected, const std::string& what)
{
    Check(bed.Arrivals() == expected, what + ": arrivals '" + bed.Arrivals() + "', expected '" + expected + "'");
}

void
OneFullPacketPerOpportunityThenTheDelay()
{
    Bed bed("1\n2\n3\n4\n", 1500, 100000, MilliSeconds(10));
    for (int i = 0; i < 3; ++i)
    {
        bed.SendAt(0, 1500);
    }
    bed.Run();
    CheckArrivals(bed, "11:1500 12:1500 13:1500", "one per opportunity");
    Check(bed.arrivals.size() == 3 && bed.arrivals[0].protocol == kIpv4, "protocol number crosses the link");
    Check(bed.fromA->opportunitiesUsed == 3 && bed.fromA->sentBytes == 4500, "counters");
}

void
PacketsShareAndSpanOpportunities()
{
    // 1000 bytes fill 1000 of the 1 ms opportunity; the next packet takes the other
    // 500 and its last 500 at 2 ms, where a 100-byte packet still fits behind it.
    Bed bed("1\n2\n3\n", 1500, 100000, MilliSeconds(10));
    bed.SendAt(0, 1000);
    bed.SendAt(0, 1000);
    bed.SendAt(0, 100);
    bed.Run();
    CheckArrivals(bed, "11:1000 12:1000 12:100", "shared and spanning opportunities");
    Check(bed.fromA->opportunitiesUsed == 2, "two opportunities used");
}

void
IdleOpportunitiesAndLeftoverBytesAreLost()
{
    {
        // The opportunity at 10 ms passes while the queue is empty; a packet sent at
        // 15 ms waits for 20 ms, one sent at 21 ms for the next period's 10 ms (= 30).
        Bed idle("10\n20\n", 1500, 100000, MilliSeconds(10));
        idle.SendAt(15, 1500);
        idle.SendAt(21, 1500);
        idle.Run();
        CheckArrivals(idle, "30:1500 40:1500", "idle opportunities wasted, trace loops");
    }
    {
        // 100 bytes use the opportunity at 5 ms; the 1400 bytes it had left are not
        // banked for a packet that arrives at 6 ms.
        Bed leftover("5\n10\n", 1500, 100000, MilliSeconds(10));
        leftover.SendAt(0, 100);
        leftover.SendAt(6, 1400);
        leftover.Run();
        CheckArrivals(leftover, "15:100 20:1400", "unused bytes of an opportunity are lost");
    }
}

void
ScaledOpportunitiesCarryFewerBytes()
{
    // --traceRateScale 0.1: 150 bytes per opportunity, so 1500 bytes take ten.
    Bed bed("1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n", 150, 100000, MilliSeconds(10));
    bed.SendAt(0, 1500);
    bed.Run();
    CheckArrivals(bed, "20:1500", "ten scaled opportunities per packet");
}

void
TheQueueDropsWhatDoesNotFit()
{
    Bed bed("1\n2\n3\n4\n", 1500, 3000, MilliSeconds(10));
    bed.SendAt(0, 1500);
    bed.SendAt(0, 1500);
    bed.SendAt(0, 1500);
    bed.Run();
    CheckArrivals(bed, "11:1500 12:1500", "drop-tail at 3000 bytes");
    Check(bed.fromA->droppedPackets == 1 && bed.fromA->droppedBytes == 1500, "drop counters");
    Check(bed.fromA->maxQueueBytes == 3000, "queue high-water mark");
}

void
DelaySeriesAppliesAtDepartureAndKeepsOrder()
{
    // 50 ms until 5 ms, then 10 ms: the packets leaving from 5 ms on would
    // overtake the ones still in flight, so they arrive right behind them.
    // Each packet (1491-1496 bytes) leaves at its own opportunity.
    Bed bed("1\n2\n3\n4\n5\n6\n7\n8\n9\n100\n", 1500, 100000, MilliSeconds(0), "time_ms,delay_ms\n0,50\n5,10\n");
    for (uint32_t size = 1491; size <= 1496; ++size)
    {
        bed.SendAt(0, size);
    }
    // Leaves at 100 ms, where the series has looped back to its first row: 50 ms.
    bed.SendAt(60, 1497);
    bed.Run();
    CheckArrivals(bed, "51:1491 52:1492 53:1493 54:1494 54:1495 54:1496 150:1497",
                  "delay series at departure, delivery order kept, the series loops with the trace");
}

} // namespace

int
main()
{
    OneFullPacketPerOpportunityThenTheDelay();
    PacketsShareAndSpanOpportunities();
    IdleOpportunitiesAndLeftoverBytesAreLost();
    ScaledOpportunitiesCarryFewerBytes();
    TheQueueDropsWhatDoesNotFit();
    DelaySeriesAppliesAtDepartureAndKeepsOrder();
    if (g_failures)
    {
        std::cerr << g_failures << " check(s) failed\n";
        return 1;
    }
    std::cout << "trace_device_test: all checks passed\n";
    return 0;
}
