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
#include "trace_device.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <memory>
#include <sstream>

using namespace ns3;

namespace mptund
{

namespace
{

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
    // At least one full-size (MTU, 1500-byte) packet, or a large packet could never be queued.
    direction->queueLimitBytes = std::max<uint32_t>(1500, static_cast<uint32_t>(meanBytesPerS * p.traceQueueMs / 1000));
    return direction;
}

/// `text` as a JSON string (file names come from the command line).
std::string
JsonString(const std::string& text)
{
    std::string quoted = "\"";
    for (char c : text)
    {
        if (c == '"' || c == '\\')
        {
            quoted += '\\';
        }
        if (static_cast<unsigned char>(c) >= 0x20)
        {
            quoted += c;
        }
    }
    return quoted + "\"";
}

/// The bytes the trace offered in each `binMs` from 0 to the end of the run.
void
WriteCapacity(std::ostream& out, const TraceDirection& d, uint64_t binMs, double simulatedS)
{
    auto bins = static_cast<uint64_t>(std::ceil(simulatedS * 1000 / binMs));
    for (uint64_t bin = 0; bin < bins; ++bin)
    {
        out << (bin ? ", " : "")
            << d.trace.CountBetweenMs(static_cast<double>(bin * binMs), static_cast<double>((bin + 1) * binMs)) *
                   static_cast<uint64_t>(d.bytesPerOpportunity);
    }
}

void
WriteDirectionJson(std::ostream& out, const TraceDirection& d, double simulatedS)
{
    out << "{\"trace\": " << JsonString(d.tracePath) << ", \"delays\": " << JsonString(d.delaysPath)
        << ", \"opportunities_per_period\": " << d.trace.Count() << ", \"period_ms\": " << d.trace.PeriodMs()
        << ", \"bytes_per_opportunity\": " << d.bytesPerOpportunity
        << ", \"mean_mbit\": " << d.trace.MeanBitPerS(d.bytesPerOpportunity) / 1e6
        << ", \"base_delay_ms\": " << d.baseDelay.GetSeconds() * 1000 << ", \"queue_limit_bytes\": " << d.queueLimitBytes
        << ", \"max_queue_bytes\": " << d.maxQueueBytes << ", \"opportunities_used\": " << d.opportunitiesUsed
        << ", \"sent_packets\": " << d.sentPackets << ", \"sent_bytes\": " << d.sentBytes
        << ", \"dropped_packets\": " << d.droppedPackets << ", \"dropped_bytes\": " << d.droppedBytes
        << ", \"capacity_bytes_per_s\": [";
    // What the trace offered in each simulated second of the run (to read), and
    // in each 100 ms (so the runner can set a path's throughput against the
    // capacity of its own transfer's window, whose ends fall mid-second).
    WriteCapacity(out, d, 1000, simulatedS);
    out << "], \"capacity_bytes_per_100ms\": [";
    WriteCapacity(out, d, 100, simulatedS);
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

    auto [accessDevice, coreDevice] = InstallTraceLink(ctx.accessRouter, up, ctx.coreRouter, down);

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
        out << (i ? ", " : "") << JsonString(link.name) << ": {\"up\": ";
        WriteDirectionJson(out, *link.up, simulatedS);
        out << ", \"down\": ";
        WriteDirectionJson(out, *link.down, simulatedS);
        out << "}";
    }
    out << "}";
}

} // namespace mptund
