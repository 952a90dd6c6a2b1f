// LTE link: the access router is an LTE UE; its eNB reaches the EPC
// (PointToPointEpcHelper: SGW/PGW and MME, GTP-U over point-to-point S1-U), and
// the PGW has a wired backhaul to the core router. With the "lte-handover"
// event a second eNB (joined by X2) takes the UE over at --eventAtS.
//
// Addressing: the EPC normally numbers UEs from 7.0.0.0/8 (hard-coded in
// NoBackhaulEpcHelper, no attribute in 3.37). We do not use that helper: the UE
// device gets a 198.19.x address of our own, which the EPC reads when the
// default bearer is activated (NoBackhaulEpcHelper::ActivateEpsBearer). The
// UE is a router, though: the datagrams it carries come from the client's
// uplink address 198.18.<i>.2 and the server answers to that address. The PGW
// only tunnels downlink packets to addresses it knows as a UE's, so we register
// the client's uplink address for the UE's IMSI as well
// (EpcPgwApplication::SetUeAddress) and route that subnet into the PGW's tunnel
// device. The PGW's own tunnel address stays 7.0.0.1: it never leaves ns-3.
#include "scenario.h"

#include "ns3/lte-module.h"
#include "ns3/mobility-module.h"
#include "ns3/point-to-point-module.h"
#include "ns3/virtual-net-device.h"

#include <sstream>

using namespace ns3;

namespace mptund
{

namespace
{

Ptr<EpcPgwApplication>
PgwApplication(Ptr<Node> pgw)
{
    for (uint32_t a = 0; a < pgw->GetNApplications(); ++a)
    {
        if (Ptr<EpcPgwApplication> app = DynamicCast<EpcPgwApplication>(pgw->GetApplication(a)))
        {
            return app;
        }
    }
    NS_FATAL_ERROR("the PGW node has no EpcPgwApplication");
}

/// The PGW's GTP tunnel device (a VirtualNetDevice): downlink traffic for UEs goes there.
Ptr<NetDevice>
PgwTunnelDevice(Ptr<Node> pgw)
{
    for (uint32_t d = 0; d < pgw->GetNDevices(); ++d)
    {
        if (Ptr<VirtualNetDevice> tunnel = DynamicCast<VirtualNetDevice>(pgw->GetDevice(d)))
        {
            return tunnel;
        }
    }
    NS_FATAL_ERROR("the PGW node has no tunnel device");
}

void
OnHandoverStart(std::string /*context*/, uint64_t imsi, uint16_t cellId, uint16_t rnti, uint16_t targetCellId)
{
    std::ostringstream text;
    text << "lte-handover: UE imsi " << imsi << " (rnti " << rnti << ") leaves cell " << cellId << " for cell "
         << targetCellId;
    Note(text.str());
}

void
OnHandoverEnd(std::string /*context*/, uint64_t imsi, uint16_t cellId, uint16_t rnti)
{
    std::ostringstream text;
    text << "lte-handover: UE imsi " << imsi << " now in cell " << cellId << " (rnti " << rnti << ")";
    Note(text.str());
}

} // namespace

void
BuildLteLink(LinkContext& ctx)
{
    const Params& p = ctx.params;
    const bool handover = p.event == "lte-handover";

    // The RLC UM transmit buffer defaults to 10 kB, a few packets: real modems
    // buffer far more, and a tiny buffer would turn every TCP burst into loss.
    Config::SetDefault("ns3::LteRlcUm::MaxTxBufferSize", UintegerValue(p.lteRlcBufferBytes));

    Ptr<LteHelper> lte = CreateObject<LteHelper>();
    Ptr<PointToPointEpcHelper> epc = CreateObject<PointToPointEpcHelper>();
    lte->SetEpcHelper(epc);
    KeepAlive(lte);
    KeepAlive(epc);
    lte->SetEnbDeviceAttribute("DlBandwidth", UintegerValue(p.lteRbs));
    lte->SetEnbDeviceAttribute("UlBandwidth", UintegerValue(p.lteRbs));
    // Handovers happen only when the scenario asks for one, at a known time.
    lte->SetHandoverAlgorithmType("ns3::NoOpHandoverAlgorithm");

    NodeContainer enbs;
    enbs.Create(handover ? 2 : 1);
    MobilityHelper fixed;
    fixed.SetMobilityModel("ns3::ConstantPositionMobilityModel");
    fixed.Install(enbs);
    fixed.Install(ctx.accessRouter);
    enbs.Get(0)->GetObject<MobilityModel>()->SetPosition(Vector(0, 0, 0));
    if (handover)
    {
        enbs.Get(1)->GetObject<MobilityModel>()->SetPosition(Vector(p.lteEnbSpacingM, 0, 0));
    }
    ctx.accessRouter->GetObject<MobilityModel>()->SetPosition(Vector(p.lteDistanceM, 0, 0));

    NetDeviceContainer enbDevices = lte->InstallEnbDevice(enbs);
    NetDeviceContainer ueDevice = lte->InstallUeDevice(NodeContainer(ctx.accessRouter));

    // The UE's own address (simulation only), assigned before the bearer is
    // activated so that the EPC learns it.
    Ipv4AddressHelper ueSubnet = ctx.InternalSubnet(0);
    ueSubnet.Assign(ueDevice);
    StaticRouting(ctx.accessRouter)->SetDefaultRoute(epc->GetUeDefaultGatewayAddress(), InterfaceOf(ueDevice.Get(0)));
    lte->Attach(ueDevice.Get(0), enbDevices.Get(0));

    Ptr<Node> pgw = epc->GetPgwNode();
    uint64_t imsi = DynamicCast<LteUeNetDevice>(ueDevice.Get(0))->GetImsi();
    PgwApplication(pgw)->SetUeAddress(imsi, ctx.clientAddress);

    if (handover)
    {
        lte->AddX2Interface(enbs);
        lte->HandoverRequest(Seconds(p.eventAtS), ueDevice.Get(0), enbDevices.Get(0), enbDevices.Get(1));
        Config::Connect("/NodeList/*/DeviceList/*/LteUeRrc/HandoverStart", MakeCallback(&OnHandoverStart));
        Config::Connect("/NodeList/*/DeviceList/*/LteUeRrc/HandoverEndOk", MakeCallback(&OnHandoverEnd));
    }

    PointToPointHelper backhaul;
    backhaul.SetDeviceAttribute("DataRate", StringValue("100Mbps"));
    backhaul.SetChannelAttribute("Delay", StringValue(p.lteBackhaulDelay));
    NetDeviceContainer backhaulDevices = backhaul.Install(pgw, ctx.coreRouter);
    Ipv4AddressHelper backhaulSubnet = ctx.InternalSubnet(1);
    Ipv4InterfaceContainer backhaulAddresses = backhaulSubnet.Assign(backhaulDevices);

    StaticRouting(pgw)->AddNetworkRouteTo(ctx.clientSubnet, ctx.clientMask, InterfaceOf(PgwTunnelDevice(pgw)));
    StaticRouting(pgw)->SetDefaultRoute(backhaulAddresses.GetAddress(1), InterfaceOf(backhaulDevices.Get(0)));
    StaticRouting(ctx.coreRouter)
        ->AddNetworkRouteTo(ctx.clientSubnet, ctx.clientMask, backhaulAddresses.GetAddress(0),
                            InterfaceOf(backhaulDevices.Get(1)));
}

} // namespace mptund
