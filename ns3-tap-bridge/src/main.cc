// mptund-ns3: the scenario program. Attaches existing tap devices (one per
// client uplink, one toward the server) to simulated LTE / Wi-Fi /
// point-to-point links and runs them in real time, so real mptund daemons in
// network namespaces carry real traffic across ns-3.
//
//   mptund-ns3 --links=lte,wifi,p2p --p2pRate=4Mbps --event=wifi-walk --eventAtS=10
//              --statsFile=ns3.json --readyFile=ready
//
// The taps must exist (ip tuntap add mode tap) in the network namespace this
// program runs in; see ns3_hybrid.py, which also moves them to the client and server
// namespaces once they are open. Stops on SIGTERM/SIGINT or after --durationS,
// then prints its counters as JSON.
#include "monitor.h"
#include "scenario.h"
#include "trace_file.h"

#include "ns3/csma-module.h"
#include "ns3/tap-bridge-module.h"

#include <chrono>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <functional>
#include <sstream>
#include <thread>

using namespace ns3;

namespace mptund
{

namespace
{

const auto kProgramStart = std::chrono::steady_clock::now();

// The LAN between the core router and the server namespace's tap.
const Ipv4Address kCoreLanAddress("198.18.250.1");
const Ipv4Address kServerTapAddress("198.18.250.2");
const Ipv4Address kServerPublicAddress("198.18.0.1");
const Ipv4Mask kLanMask("255.255.255.0");

/// Bridge the existing Linux tap `tapName` onto a fresh CSMA LAN whose other
/// member is `router`, with `routerAddress` on the router's side.
///
/// The tap's end is a "ghost" node without an IP stack: TapBridge in UseBridge
/// mode hands every frame from the tap to the ghost's CSMA device (which can
/// send with a foreign source MAC) and every frame on the LAN back to the tap,
/// so the Linux side behaves as one more host on the simulated Ethernet, with
/// its own MAC and the address the test bed gave it. UseBridge rather than
/// UseLocal: no MAC rewriting, and the Linux side keeps full control of the
/// tap (addresses, routes, moving it to another namespace). ConfigureLocal
/// would make ns-3 create and address the tap itself, in its own namespace.
/// All three modes run the tap-creator helper to open the device (see README).
///
/// With a non-empty `pcapDir`, the router's side of the LAN is captured to
/// <pcapDir>/<tapName>-<node>-<device>.pcap: every frame between Linux and ns-3.
uint32_t
AttachTap(const std::string& tapName, Ptr<Node> router, Ipv4Address routerAddress, const std::string& pcapDir)
{
    Ptr<Node> ghost = CreateObject<Node>();
    CsmaHelper csma;
    // Fast and without delay: the LAN stands for a cable inside the box, the
    // link under study comes after the router.
    csma.SetChannelAttribute("DataRate", StringValue("1Gbps"));
    csma.SetChannelAttribute("Delay", TimeValue(Seconds(0)));
    NetDeviceContainer devices = csma.Install(NodeContainer(ghost, router));

    TapBridgeHelper tapBridge;
    tapBridge.SetAttribute("Mode", StringValue("UseBridge"));
    tapBridge.SetAttribute("DeviceName", StringValue(tapName));
    tapBridge.Install(ghost, devices.Get(0));
    if (!pcapDir.empty())
    {
        csma.EnablePcap(pcapDir + "/" + tapName, devices.Get(1), false);
    }

    Ptr<Ipv4> ipv4 = router->GetObject<Ipv4>();
    uint32_t interface = ipv4->AddInterface(devices.Get(1));
    ipv4->AddAddress(interface, Ipv4InterfaceAddress(routerAddress, kLanMask));
    ipv4->SetUp(interface);
    return interface;
}

Ptr<Node>
NewRouter()
{
    Ptr<Node> router = CreateObject<Node>();
    InternetStackHelper().Install(router);
    return router;
}

std::vector<std::string>
SplitLinks(const std::string& text)
{
    std::vector<std::string> names;
    std::stringstream stream(text);
    std::string name;
    while (std::getline(stream, name, ','))
    {
        if (!name.empty())
        {
            names.push_back(name);
        }
    }
    return names;
}

/// The command line's options, each registered once: parsed by ns-3's
/// CommandLine and written back into the report with the value the run used
/// (defaults included), so a results file names its whole scenario.
class OptionTable
{
  public:
    explicit OptionTable(CommandLine& cmd)
        : m_cmd(cmd)
    {
    }

    template <typename T>
    void Add(const std::string& name, const std::string& help, T& value)
    {
        m_cmd.AddValue(name, help, value);
        m_writers.emplace_back([name, &value](std::ostream& out) {
            out << "\"" << name << "\": ";
            WriteJsonValue(out, value);
        });
    }

    void WriteJson(std::ostream& out) const
    {
        out << "{";
        for (size_t i = 0; i < m_writers.size(); ++i)
        {
            out << (i ? ", " : "");
            m_writers[i](out);
        }
        out << "}";
    }

  private:
    static void WriteJsonValue(std::ostream& out, const std::string& text)
    {
        out << '"';
        for (char c : text)
        {
            if (c == '"' || c == '\\')
            {
                out << '\\';
            }
            if (static_cast<unsigned char>(c) >= 0x20)
            {
                out << c;
            }
        }
        out << '"';
    }

    template <typename T>
    static void WriteJsonValue(std::ostream& out, const T& number)
    {
        out << number;
    }

    CommandLine& m_cmd;
    std::vector<std::function<void(std::ostream&)>> m_writers;
};

/// Block the simulator's thread for `wallMs` of wall-clock time (--stallMs):
/// the simulated clock stands still while the wall clock runs on, exactly what
/// a simulator that cannot keep up does.
void
Stall(double wallMs)
{
    Note("forced stall of " + std::to_string(wallMs) + " ms (--stallMs)");
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(wallMs));
}

void
WriteReady(std::string path)
{
    // The wall clock (CLOCK_MONOTONIC, which steady_clock reads on Linux, as
    // Python's time.monotonic does) at this simulated time: the runner maps
    // its transfer's wall-clock window onto simulated time with it.
    double monotonicS = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    std::ofstream(path) << std::setprecision(15) << "{\"taps_open\": true, \"sim_s\": " << Simulator::Now().GetSeconds()
                        << ", \"monotonic_s\": " << monotonicS << "}\n";
    Note("all taps open, ready");
}

void
OnStopSignal(int)
{
    RealtimeMonitor::s_stopRequested = 1;
}

void
WriteDirection(std::ostream& out, const DirectionCounters& c)
{
    double span = c.lastDeliveredS - c.firstDeliveredS;
    double mbit = span > 0 ? c.deliveredBytes * 8 / span / 1e6 : 0.0;
    out << "{\"offered_packets\": " << c.offeredPackets << ", \"offered_bytes\": " << c.offeredBytes
        << ", \"delivered_packets\": " << c.deliveredPackets << ", \"delivered_bytes\": " << c.deliveredBytes
        << ", \"first_delivered_s\": " << c.firstDeliveredS << ", \"last_delivered_s\": " << c.lastDeliveredS
        << ", \"mean_delivered_mbit\": " << mbit << ", \"delivered_bytes_per_s\": [";
    for (size_t second = 0; second < c.deliveredBytesPerSecond.size(); ++second)
    {
        out << (second ? ", " : "") << c.deliveredBytesPerSecond[second];
    }
    out << "]}";
}

void
WriteReport(std::ostream& out, const Params& p, const OptionTable& options, const LinkCounterSet& counters,
            const RealtimeMonitor& monitor, double wallS)
{
    out << std::setprecision(6) << "{\"simulated_s\": " << Simulator::Now().GetSeconds() << ", \"wall_s\": " << wallS
        << ", \"sync_mode\": \"" << (p.hardLimitMs > 0 ? "HardLimit" : "BestEffort") << "\", \"event\": \""
        << p.event << "\", \"scenario\": ";
    options.WriteJson(out);
    out << ", \"lag\": ";
    monitor.WriteJson(out);
    out << ", \"links\": {";
    bool first = true;
    for (const LinkCounters& link : counters.Links())
    {
        out << (first ? "" : ", ") << "\"" << link.name << "\": {\"up\": ";
        WriteDirection(out, link.up);
        out << ", \"down\": ";
        WriteDirection(out, link.down);
        out << "}";
        first = false;
    }
    out << "}, \"trace_links\": ";
    WriteTraceLinksJson(out, Simulator::Now().GetSeconds());
    out << "}\n";
}

} // namespace

Ipv4AddressHelper
LinkContext::InternalSubnet(uint32_t k) const
{
    NS_ABORT_MSG_IF(10 * index + k > 249, "too many links for the 198.19.<10 i + k>.0/24 plan");
    std::ostringstream network;
    network << "198.19." << 10 * index + k << ".0";
    return Ipv4AddressHelper(network.str().c_str(), "255.255.255.0");
}

Ptr<Ipv4StaticRouting>
StaticRouting(Ptr<Node> node)
{
    return Ipv4StaticRoutingHelper().GetStaticRouting(node->GetObject<Ipv4>());
}

uint32_t
InterfaceOf(Ptr<NetDevice> device)
{
    int32_t interface = device->GetNode()->GetObject<Ipv4>()->GetInterfaceForDevice(device);
    NS_ABORT_MSG_IF(interface < 0, "device has no IPv4 interface");
    return interface;
}

std::vector<Ptr<Object>> g_keptAlive;

void
KeepAlive(Ptr<Object> helper)
{
    g_keptAlive.push_back(helper);
}

void
Note(const std::string& text)
{
    double wallS = std::chrono::duration<double>(std::chrono::steady_clock::now() - kProgramStart).count();
    std::cerr << std::fixed << std::setprecision(3) << "[sim " << Simulator::Now().GetSeconds() << " s, wall "
              << wallS << " s] " << text << std::endl;
}

} // namespace mptund

int
main(int argc, char* argv[])
{
    using namespace mptund;
    Params p;
    CommandLine cmd(__FILE__);
    OptionTable options(cmd);
    cmd.Usage("Attach mptund's uplink taps to simulated LTE, Wi-Fi and point-to-point links (real time).");
    options.Add("links", "comma-separated links in path order: lte, wifi, p2p, trace (tap i is named after link i)", p.links);
    options.Add("serverTap", "tap device toward the server namespace", p.serverTap);
    options.Add("durationS", "stop after this many simulated seconds at the latest", p.durationS);
    options.Add("statsFile", "write the final counters (JSON) here as well as to stdout", p.statsFile);
    options.Add("readyFile", "written once every tap is open", p.readyFile);
    options.Add("pcapDir", "capture each tap's LAN (router side) into this directory", p.pcapDir);
    options.Add("lagSampleMs", "interval of the wall-clock vs simulation-clock probe", p.lagSampleMs);
    options.Add("lagToleranceMs", "largest lag that still counts as keeping up with real time", p.lagToleranceMs);
    options.Add("lagWarmupS", "lag before this simulated time counts as start-up, reported apart", p.lagWarmupS);
    options.Add("hardLimitMs", "if > 0: SynchronizationMode HardLimit, abort when this far behind", p.hardLimitMs);
    options.Add("p2pRate", "point-to-point link rate (each direction)", p.p2pRate);
    options.Add("p2pDelay", "point-to-point one-way delay", p.p2pDelay);
    options.Add("p2pErrorRate", "point-to-point packet loss probability (each direction)", p.p2pErrorRate);
    options.Add("p2pQueuePackets", "point-to-point transmit queue (packets)", p.p2pQueuePackets);
    options.Add("wifiMode", "802.11a PHY mode (OfdmRate6Mbps ... OfdmRate54Mbps) or Minstrel", p.wifiMode);
    options.Add("wifiDistanceM", "station to access point distance at start (m)", p.wifiDistanceM);
    options.Add("wifiBackhaulDelay", "access point to core router delay", p.wifiBackhaulDelay);
    options.Add("lteRbs", "LTE bandwidth in resource blocks (6, 15, 25, 50, 75, 100)", p.lteRbs);
    options.Add("lteDistanceM", "UE to eNB distance (m)", p.lteDistanceM);
    options.Add("lteEnbSpacingM", "distance between the two eNBs (lte-handover)", p.lteEnbSpacingM);
    options.Add("lteRlcBufferBytes", "RLC UM transmit buffer (bytes)", p.lteRlcBufferBytes);
    options.Add("lteBackhaulDelay", "PGW to core router delay", p.lteBackhaulDelay);
    options.Add("traceDown", "trace link: Mahimahi delivery trace server -> client", p.traceDown);
    options.Add("traceUp", "trace link: Mahimahi delivery trace client -> server", p.traceUp);
    options.Add("traceDelay", "trace link: one-way delay of each direction without a delay series", p.traceDelay);
    options.Add("traceDownDelays", "trace link: time_ms,delay_ms series server -> client (loops with the trace)",
                p.traceDownDelays);
    options.Add("traceUpDelays", "trace link: time_ms,delay_ms series client -> server (loops with the trace)",
                p.traceUpDelays);
    options.Add("traceRateScale", "trace link: each opportunity carries 1500 x this many bytes (linkem's rate_scale)",
                p.traceRateScale);
    options.Add("traceQueueMs", "trace link: drop-tail queue of this many ms at the trace's mean rate",
                p.traceQueueMs);
    options.Add("event", "none, wifi-walk or lte-handover", p.event);
    options.Add("eventAtS", "when the event starts (simulated seconds)", p.eventAtS);
    options.Add("walkSpeedMps", "wifi-walk speed away from the access point (m/s)", p.walkSpeedMps);
    options.Add("stallAtS", "forced stall: when (simulated seconds; see --stallMs)", p.stallAtS);
    options.Add("stallMs", "forced stall: block the simulator this long (wall-clock ms) at --stallAtS, so the run "
                "falls behind real time on purpose (checks the verdict); 0 = off", p.stallMs);
    cmd.Parse(argc, argv);

    std::vector<std::string> links = SplitLinks(p.links);
    if (links.empty() || links.size() > 24)
    {
        std::cerr << "--links: give 1 to 24 of lte, wifi, p2p, trace, e.g. --links=lte,wifi,p2p\n";
        return 2;
    }
    if (p.event != "none" && p.event != "wifi-walk" && p.event != "lte-handover")
    {
        std::cerr << "--event: '" << p.event << "' is not one of none, wifi-walk, lte-handover\n";
        return 2;
    }

    // Real packets from Linux come and go: the simulator must pace itself by
    // the wall clock, and IP/UDP/TCP checksums must be real (ns-3 rewrites the
    // TTL of every forwarded packet; with checksums off it would send header
    // checksums of zero, which the kernel drops).
    GlobalValue::Bind("SimulatorImplementationType", StringValue("ns3::RealtimeSimulatorImpl"));
    GlobalValue::Bind("ChecksumEnabled", BooleanValue(true));
    if (p.hardLimitMs > 0)
    {
        Config::SetDefault("ns3::RealtimeSimulatorImpl::SynchronizationMode", StringValue("HardLimit"));
        Config::SetDefault("ns3::RealtimeSimulatorImpl::HardLimit", TimeValue(Time::FromDouble(p.hardLimitMs, Time::MS)));
    }

    Ptr<Node> core = NewRouter();
    AttachTap(p.serverTap, core, kCoreLanAddress, p.pcapDir);
    StaticRouting(core)->AddHostRouteTo(kServerPublicAddress, kServerTapAddress, 1);

    LinkCounterSet counters;
    for (uint32_t i = 1; i <= links.size(); ++i)
    {
        const std::string& name = links[i - 1];
        Ptr<Node> access = NewRouter();
        std::ostringstream subnet, gateway, client;
        subnet << "198.18." << i << ".0";
        gateway << "198.18." << i << ".1";
        client << "198.18." << i << ".2";
        AttachTap(name, access, Ipv4Address(gateway.str().c_str()), p.pcapDir);
        LinkContext ctx{p, i, access, core, Ipv4Address(subnet.str().c_str()), kLanMask,
                        Ipv4Address(client.str().c_str())};
        if (name == "lte")
        {
            BuildLteLink(ctx);
        }
        else if (name == "wifi")
        {
            BuildWifiLink(ctx);
        }
        else if (name == "p2p")
        {
            BuildP2pLink(ctx);
        }
        else if (name == "trace")
        {
            try
            {
                BuildTraceLink(ctx);
            }
            catch (const TraceFileError& error)
            {
                std::cerr << "trace link: " << error.what() << "\n";
                return 2;
            }
        }
        else
        {
            std::cerr << "--links: unknown link type '" << name << "' (known: lte, wifi, p2p, trace)\n";
            return 2;
        }
        counters.AddLink(i, name, access);
        Note("link " + std::to_string(i) + ": " + name + " on tap '" + name + "', client subnet " + subnet.str() +
             "/24");
    }
    counters.WatchCore(core);

    RealtimeMonitor monitor(Time::FromDouble(p.lagSampleMs, Time::MS), Seconds(p.lagWarmupS), p.lagToleranceMs);
    monitor.Start();
    if (p.stallMs > 0)
    {
        Simulator::Schedule(Seconds(p.stallAtS), &Stall, p.stallMs);
    }
    if (!p.readyFile.empty())
    {
        // TapBridge opens its tap at time 0 (TapBridge::Start); 1 ms later all are open.
        Simulator::Schedule(MilliSeconds(1), &WriteReady, p.readyFile);
    }
    std::signal(SIGTERM, OnStopSignal);
    std::signal(SIGINT, OnStopSignal);
    Simulator::Stop(Seconds(p.durationS));

    auto wallStart = std::chrono::steady_clock::now();
    Simulator::Run();
    double wallS = std::chrono::duration<double>(std::chrono::steady_clock::now() - wallStart).count();

    std::ostringstream report;
    WriteReport(report, p, options, counters, monitor, wallS);
    std::cout << report.str() << std::flush;
    if (!p.statsFile.empty())
    {
        std::ofstream(p.statsFile) << report.str();
    }
    Note(std::string("stopped; max real-time lag ") + std::to_string(monitor.MaxLagMs()) + " ms, " +
         (monitor.KeptUp() ? "kept up with real time" : "FELL BEHIND real time"));
    Simulator::Destroy();
    g_keptAlive.clear();
    return 0;
}
