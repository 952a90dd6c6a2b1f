// Point-to-point link: the access router is joined to the core router by one
// PointToPoint channel of configurable rate, one-way delay, queue and random
// packet loss (RateErrorModel on both receiving devices, so each direction
// loses packets independently).
#include "scenario.h"

#include "ns3/point-to-point-module.h"

using namespace ns3;

namespace mptund
{

void
BuildP2pLink(LinkContext& ctx)
{
    const Params& p = ctx.params;
    PointToPointHelper helper;
    helper.SetDeviceAttribute("DataRate", StringValue(p.p2pRate));
    helper.SetChannelAttribute("Delay", StringValue(p.p2pDelay));
    helper.SetQueue("ns3::DropTailQueue<Packet>",
                    "MaxSize",
                    QueueSizeValue(QueueSize(QueueSizeUnit::PACKETS, p.p2pQueuePackets)));
    NetDeviceContainer devices = helper.Install(ctx.accessRouter, ctx.coreRouter);

    if (p.p2pErrorRate > 0)
    {
        for (uint32_t d = 0; d < devices.GetN(); ++d)
        {
            Ptr<RateErrorModel> loss = CreateObject<RateErrorModel>();
            loss->SetUnit(RateErrorModel::ERROR_UNIT_PACKET);
            loss->SetRate(p.p2pErrorRate);
            devices.Get(d)->SetAttribute("ReceiveErrorModel", PointerValue(loss));
        }
    }

    Ipv4AddressHelper subnet = ctx.InternalSubnet(0);
    Ipv4InterfaceContainer addresses = subnet.Assign(devices);

    StaticRouting(ctx.accessRouter)->SetDefaultRoute(addresses.GetAddress(1), InterfaceOf(devices.Get(0)));
    StaticRouting(ctx.coreRouter)
        ->AddNetworkRouteTo(ctx.clientSubnet, ctx.clientMask, addresses.GetAddress(0), InterfaceOf(devices.Get(1)));
}

} // namespace mptund
