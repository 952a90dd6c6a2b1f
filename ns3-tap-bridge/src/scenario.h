// Shared declarations of the hybrid-emulation scenario: the parameters, the
// context a link builder gets, and one builder per link type.
//
// Topology (see README.md): every uplink of the client namespace is a Linux tap
// device bridged (TapBridge, UseBridge mode) to a CSMA device on a "ghost" node;
// the ghost's CSMA LAN leads to the link's *access router*, which owns the
// client-facing gateway address 198.18.<i>.1. A link builder connects that
// access router to the *core router*, whose own CSMA LAN is bridged to a tap in
// the server namespace. Everything the real kernels see is in 198.18.0.0/15;
// the subnets between simulated nodes are in 198.19.0.0/16 and never leave ns-3.
#ifndef MPTUND_NS3_SCENARIO_H
#define MPTUND_NS3_SCENARIO_H

#include "ns3/core-module.h"
#include "ns3/internet-module.h"
#include "ns3/network-module.h"

#include <ostream>
#include <string>
#include <vector>

namespace mptund
{

/// Everything the command line can set. Defaults: a few Mbit/s per link, so the
/// real-time simulator keeps up on a two-core machine.
struct Params
{
    std::string links = "lte,wifi,p2p"; ///< which links, in path order
    std::string serverTap = "srv";      ///< tap that ends in the server namespace
    double durationS = 600;             ///< hard stop of the simulation (seconds)
    std::string statsFile;              ///< JSON written at exit ("" = stdout only)
    std::string readyFile;              ///< touched once every tap is opened
    std::string pcapDir;                ///< "" = no packet capture
    double lagSampleMs = 5;             ///< interval of the real-time lag probe
    double lagToleranceMs = 10;         ///< max lag that still counts as "kept up"
    double lagWarmupS = 1;              ///< lag before this is start-up, reported apart
    double hardLimitMs = 0;             ///< > 0: SynchronizationMode HardLimit, abort beyond it

    // Point-to-point link.
    std::string p2pRate = "4Mbps";
    std::string p2pDelay = "20ms";
    double p2pErrorRate = 0;            ///< packet error rate of each direction
    uint32_t p2pQueuePackets = 100;

    // Wi-Fi link (802.11a, Yans PHY, log-distance path loss).
    std::string wifiMode = "OfdmRate6Mbps"; ///< constant PHY mode, or "Minstrel" (adaptive)
    double wifiDistanceM = 10;              ///< station to access point at start
    std::string wifiBackhaulDelay = "5ms";  ///< access point to core router

    // LTE link (EPC, point-to-point backhaul).
    uint32_t lteRbs = 15;                   ///< 6, 15, 25, 50, 75 or 100 resource blocks (up and down)
    double lteDistanceM = 200;              ///< UE to its eNB at start
    double lteEnbSpacingM = 500;            ///< between the two eNBs (handover event only)
    uint32_t lteRlcBufferBytes = 200000;    ///< RLC UM transmit buffer of UE and eNB
    std::string lteBackhaulDelay = "10ms";  ///< PGW to core router

    // Trace-driven link (Mahimahi delivery traces, see link_trace.cc).
    std::string traceDown;              ///< server -> client trace (required for a trace link)
    std::string traceUp;                ///< client -> server trace (required for a trace link)
    std::string traceDelay = "20ms";    ///< one-way delay, each direction, unless a delay series is given
    std::string traceDownDelays;        ///< "" or a time_ms,delay_ms series (loops with the down trace)
    std::string traceUpDelays;          ///< "" or a time_ms,delay_ms series (loops with the up trace)
    double traceRateScale = 1;          ///< bytes per opportunity = 1500 x this (linkem's rate_scale)
    double traceQueueMs = 100;          ///< drop-tail limit: this long at the trace's (scaled) mean rate

    // Optional event.
    std::string event = "none"; ///< none | wifi-walk | lte-handover
    double eventAtS = 10;       ///< when the event starts (simulation seconds)
    double walkSpeedMps = 20;   ///< wifi-walk: away from the AP; at 6 Mbit/s the link dies near 80-100 m

    // Forced stall, to check that a run which falls behind is caught: at
    // stallAtS one event blocks the simulator for stallMs of wall-clock time,
    // as an expensive event or a descheduled process would.
    double stallAtS = 2;        ///< simulated time of the stall
    double stallMs = 0;         ///< 0 = no stall
};

/// Per-direction counters of one link, measured where traffic enters and leaves it.
struct DirectionCounters
{
    uint64_t offeredPackets = 0;   ///< handed to the link (may still be dropped in it)
    uint64_t offeredBytes = 0;
    uint64_t deliveredPackets = 0; ///< came out of the link's far end
    uint64_t deliveredBytes = 0;
    double firstDeliveredS = -1;   ///< simulation time of first and last delivery
    double lastDeliveredS = -1;
    std::vector<uint64_t> deliveredBytesPerSecond; ///< by simulation second: the link's rate over time
};

struct LinkCounters
{
    std::string name;
    DirectionCounters up;   ///< client -> server
    DirectionCounters down; ///< server -> client
};

/// What a link builder gets: the two routers it must join, the addresses, and a
/// place to note events. A builder must (1) connect `accessRouter` to
/// `coreRouter` through whatever nodes the link type needs, (2) give the access
/// router a default route into the link, (3) give the core router a route to
/// `clientSubnet` back through the link, and (4) route both ways on every node
/// in between.
struct LinkContext
{
    const Params& params;
    uint32_t index;                  ///< path number i (1-based): client subnet 198.18.<i>.0/24
    ns3::Ptr<ns3::Node> accessRouter; ///< has the IP stack and the client LAN on interface 1
    ns3::Ptr<ns3::Node> coreRouter;   ///< has the IP stack and the server LAN on interface 1
    ns3::Ipv4Address clientSubnet;   ///< 198.18.<i>.0
    ns3::Ipv4Mask clientMask;        ///< /24
    ns3::Ipv4Address clientAddress;  ///< 198.18.<i>.2, the uplink tap's address

    /// The k-th internal subnet of this link, 198.19.<10 i + k>.0/24: simulation only.
    ns3::Ipv4AddressHelper InternalSubnet(uint32_t k) const;
};

void BuildP2pLink(LinkContext& ctx);
void BuildWifiLink(LinkContext& ctx);
void BuildLteLink(LinkContext& ctx);
/// Throws TraceFileError when a trace file or option is unusable.
void BuildTraceLink(LinkContext& ctx);

/// The trace links' replay counters and per-second capacity, as a JSON object by link name.
void WriteTraceLinksJson(std::ostream& out, double simulatedS);

/// Static routing helpers (every node uses Ipv4StaticRouting; no global routing,
/// which cannot see through the EPC's GTP tunnel).
ns3::Ptr<ns3::Ipv4StaticRouting> StaticRouting(ns3::Ptr<ns3::Node> node);
uint32_t InterfaceOf(ns3::Ptr<ns3::NetDevice> device);

/// Keep a helper alive until the simulation ends. Needed for LteHelper and its
/// EpcHelper: the EPC helper disposes the SGW and PGW nodes when it goes away.
void KeepAlive(ns3::Ptr<ns3::Object> helper);

/// Print a timestamped line on stderr (simulation and wall-clock time).
void Note(const std::string& text);

} // namespace mptund

#endif
