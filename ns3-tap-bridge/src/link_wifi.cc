// Wi-Fi link: the access router is an 802.11a station; its access point is a
// separate node with a wired backhaul (point-to-point, 100 Mbit/s) to the core
// router. Yans PHY with the default log-distance path loss (exponent 3), so the
// distance between station and AP sets the signal level; with the "wifi-walk"
// event the station walks away from the AP until it loses the association.
#include "scenario.h"

#include "ns3/mobility-module.h"
#include "ns3/point-to-point-module.h"
#include "ns3/wifi-module.h"

#include <sstream>

using namespace ns3;

namespace mptund
{

namespace
{

/// Start the station walking away from the access point (along +x).
void
StartWalking(Ptr<ConstantVelocityMobilityModel> mobility, double speedMps)
{
    mobility->SetVelocity(Vector(speedMps, 0, 0));
    std::ostringstream text;
    text << "wifi-walk: station starts walking away from the AP at " << speedMps << " m/s from x="
         << mobility->GetPosition().x << " m";
    Note(text.str());
}

/// Log association changes: they are the visible effect of walking out of range.
void
OnAssoc(std::string /*context*/, Mac48Address bssid)
{
    std::ostringstream text;
    text << "wifi: station associated with " << bssid;
    Note(text.str());
}

void
OnDeAssoc(std::string /*context*/, Mac48Address bssid)
{
    std::ostringstream text;
    text << "wifi: station lost its association with " << bssid;
    Note(text.str());
}

} // namespace

void
BuildWifiLink(LinkContext& ctx)
{
    const Params& p = ctx.params;
    Ptr<Node> station = ctx.accessRouter;
    Ptr<Node> accessPoint = CreateObject<Node>();
    InternetStackHelper().Install(accessPoint);

    WifiHelper wifi;
    wifi.SetStandard(WIFI_STANDARD_80211a);
    if (p.wifiMode == "Minstrel")
    {
        wifi.SetRemoteStationManager("ns3::MinstrelWifiManager");
    }
    else
    {
        // A constant rate is the cheapest to simulate and makes the link's
        // capacity a parameter; control frames at the basic rate.
        wifi.SetRemoteStationManager("ns3::ConstantRateWifiManager",
                                     "DataMode", StringValue(p.wifiMode),
                                     "ControlMode", StringValue("OfdmRate6Mbps"));
    }
    YansWifiChannelHelper channel = YansWifiChannelHelper::Default();
    YansWifiPhyHelper phy;
    phy.SetChannel(channel.Create());

    WifiMacHelper mac;
    Ssid ssid("mptund-wifi");
    mac.SetType("ns3::StaWifiMac", "Ssid", SsidValue(ssid));
    NetDeviceContainer stationDevice = wifi.Install(phy, mac, station);
    mac.SetType("ns3::ApWifiMac", "Ssid", SsidValue(ssid));
    NetDeviceContainer apDevice = wifi.Install(phy, mac, accessPoint);

    MobilityHelper fixed;
    fixed.SetMobilityModel("ns3::ConstantPositionMobilityModel");
    fixed.Install(accessPoint);
    accessPoint->GetObject<MobilityModel>()->SetPosition(Vector(0, 0, 0));
    MobilityHelper moving;
    moving.SetMobilityModel("ns3::ConstantVelocityMobilityModel");
    moving.Install(station);
    Ptr<ConstantVelocityMobilityModel> stationMobility = station->GetObject<ConstantVelocityMobilityModel>();
    stationMobility->SetPosition(Vector(p.wifiDistanceM, 0, 0));
    if (p.event == "wifi-walk")
    {
        Simulator::Schedule(Seconds(p.eventAtS), &StartWalking, stationMobility, p.walkSpeedMps);
    }
    Config::Connect("/NodeList/" + std::to_string(station->GetId()) +
                        "/DeviceList/*/$ns3::WifiNetDevice/Mac/$ns3::StaWifiMac/Assoc",
                    MakeCallback(&OnAssoc));
    Config::Connect("/NodeList/" + std::to_string(station->GetId()) +
                        "/DeviceList/*/$ns3::WifiNetDevice/Mac/$ns3::StaWifiMac/DeAssoc",
                    MakeCallback(&OnDeAssoc));

    PointToPointHelper backhaul;
    backhaul.SetDeviceAttribute("DataRate", StringValue("100Mbps"));
    backhaul.SetChannelAttribute("Delay", StringValue(p.wifiBackhaulDelay));
    NetDeviceContainer backhaulDevices = backhaul.Install(accessPoint, ctx.coreRouter);

    Ipv4AddressHelper bss = ctx.InternalSubnet(0);
    Ipv4InterfaceContainer apAddress = bss.Assign(apDevice);
    bss.Assign(stationDevice);
    Ipv4AddressHelper backhaulSubnet = ctx.InternalSubnet(1);
    Ipv4InterfaceContainer backhaulAddresses = backhaulSubnet.Assign(backhaulDevices);

    StaticRouting(station)->SetDefaultRoute(apAddress.GetAddress(0), InterfaceOf(stationDevice.Get(0)));
    // The AP forwards client-bound traffic to the station, everything else to the core.
    Ipv4Address stationAddress = station->GetObject<Ipv4>()->GetAddress(InterfaceOf(stationDevice.Get(0)), 0).GetLocal();
    StaticRouting(accessPoint)
        ->AddNetworkRouteTo(ctx.clientSubnet, ctx.clientMask, stationAddress, InterfaceOf(apDevice.Get(0)));
    StaticRouting(accessPoint)->SetDefaultRoute(backhaulAddresses.GetAddress(1), InterfaceOf(backhaulDevices.Get(0)));
    StaticRouting(ctx.coreRouter)
        ->AddNetworkRouteTo(ctx.clientSubnet, ctx.clientMask, backhaulAddresses.GetAddress(0),
                            InterfaceOf(backhaulDevices.Get(1)));
}

} // namespace mptund
