//! Every scenario shipped in config/scenarios must load, and keep the facts its
//! source paper gives.

use std::path::{Path, PathBuf};
use std::time::Duration;

use linkem::scenario::Scenario;

fn scenarios_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/scenarios")
}

fn load(name: &str) -> Scenario {
    Scenario::load(&scenarios_dir().join(name), None)
        .unwrap_or_else(|error| panic!("{name}: {error}"))
}

/// Loads every scenario file in `dir`, each with at least one path; how many there were.
fn load_every_scenario_in(dir: &Path) -> usize {
    let mut loaded = 0;
    for entry in std::fs::read_dir(dir).unwrap_or_else(|error| panic!("{dir:?}: {error}")) {
        let path = entry.expect("readable directory").path();
        if path.extension().is_some_and(|ext| ext == "toml") {
            let scenario = Scenario::load(&path, None).unwrap_or_else(|error| panic!("{error}"));
            assert!(!scenario.paths.is_empty());
            loaded += 1;
        }
    }
    loaded
}

#[test]
fn every_shipped_scenario_loads() {
    let loaded = load_every_scenario_in(&scenarios_dir());
    assert!(
        loaded >= 5,
        "expected the five scenarios of issue 3, found {loaded}"
    );
}

#[test]
fn train_scenario_keeps_the_measured_rate_ratios() {
    let train = load("hst-eight-lte.toml");
    let measured_mbit = [35.9, 18.4, 33.3, 14.7, 14.8, 4.4, 22.5, 12.5];
    assert_eq!(train.paths.len(), measured_mbit.len());
    for (path, measured) in train.paths.iter().zip(measured_mbit) {
        let scaled = path.down.rate_bit_per_s.expect("rate set") as f64 / 1e6;
        assert!(
            (scaled - measured * train.rate_scale).abs() < 0.01,
            "{}: {scaled}",
            path.name
        );
        let rtt = path.down.delay + path.up.delay;
        assert!(
            rtt >= Duration::from_millis(40) && rtt <= Duration::from_millis(120),
            "{}: {rtt:?}",
            path.name
        );
    }
}

#[test]
fn blockage_scenarios_have_their_outages() {
    let five_g = load("5g-4g-blockage.toml");
    assert_eq!(
        five_g.paths[0].down.outages[0].duration,
        Duration::from_secs(4)
    );
    assert!(five_g.paths[1].down.outages.is_empty());
    let lte_wifi = load("lte-wifi-blockage-handover.toml");
    let wifi = lte_wifi
        .paths
        .iter()
        .find(|p| p.name == "wifi")
        .expect("wifi path");
    assert_eq!(wifi.up.outages[0].duration, Duration::from_millis(500));
    let lte = lte_wifi
        .paths
        .iter()
        .find(|p| p.name == "lte")
        .expect("lte path");
    assert_eq!(lte.down.outages[0].duration, Duration::from_secs(2));
}

fn unseen_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../benches/schedulers/unseen")
}

#[test]
fn every_unseen_benchmark_scenario_loads() {
    let loaded = load_every_scenario_in(&unseen_dir());
    assert!(
        loaded >= 25,
        "expected the 25 unseen scenarios (HISTORY.md of the benchmark), found {loaded}"
    );
}

/// The benchmark's sum of paths and its best single path come from the nominal rates,
/// so on the train the nominal rate must be what its looping trace carries on average.
#[test]
fn train_cells_nominal_rates_are_their_traces_means() {
    let train = Scenario::load(&scenarios_dir().join("u-train-cells.toml"), None)
        .unwrap_or_else(|error| panic!("{error}"));
    // 126 s is a whole number of every loop (6, 7 and 9 s).
    let tick = Duration::from_millis(10);
    let ticks = 12_600u32;
    for path in &train.paths {
        for (direction, link) in [("down", &path.down), ("up", &path.up)] {
            let trace = link.step_trace.as_ref().expect("every link is traced");
            let mean = (0..ticks)
                .map(|index| {
                    let step = trace.step_at(tick * index).expect("a step from 0 ms");
                    step.rate_bit_per_s.expect("every step sets a rate") as f64
                })
                .sum::<f64>()
                / f64::from(ticks);
            let nominal = link.rate_bit_per_s.expect("nominal rate set") as f64;
            assert!(
                (mean / nominal - 1.0).abs() < 0.05,
                "{} {direction}: trace mean {:.1} Mbit/s, nominal {:.1}",
                path.name,
                mean / 1e6,
                nominal / 1e6
            );
        }
    }
}
