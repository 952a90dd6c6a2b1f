//! The tables client and server share: `[tun]`, `[scheduler]`, `[reorder]`,
//! `[timers]`, `[log]`, `[metrics]` and `[control]`.

use super::*;

impl Validator<'_> {
    pub(super) fn tun(&self, raw: &Option<Sp<RawTun>>) -> Result<TunConfig> {
        let spanned = self.required_table(
            raw,
            "tun",
            "`name = \"mptun0\"` and `addresses = [\"198.18.100.2/24\"]`",
        )?;
        let tun = spanned.get_ref();
        let table = Table {
            path: "tun",
            header: Some(spanned.span()),
        };
        let name_value = self.required(&tun.name, &table, "name", "\"mptun0\"")?;
        let name = self.interface_name(
            name_value,
            "tun.name",
            "choose a name such as \"mptun0\" that no other interface has",
        )?;

        let list = self.required(&tun.addresses, &table, "addresses", "[\"198.18.100.2/24\"]")?;
        if list.get_ref().is_empty() {
            return Err(self
                .error(list.span(), "tun.addresses", "is empty; at least one address is required")
                .with_hint("add the tunnel's inner address with its prefix length, e.g. [\"198.18.100.2/24\"]"));
        }
        let mut addresses: Vec<IpNet> = Vec::with_capacity(list.get_ref().len());
        for (index, value) in list.get_ref().iter().enumerate() {
            let field = format!("tun.addresses[{index}]");
            let net = self.ip_net(
                value,
                &field,
                "write the address with its subnet's prefix length, e.g. \"198.18.100.2/24\" or \"fd00:6d70::2/64\"",
            )?;
            if net.prefix_len == 0 {
                return Err(self
                    .error(value.span(), &field, format!("{net} has prefix length 0"))
                    .with_hint("give the tunnel subnet's prefix length, e.g. /24 or /64"));
            }
            if net.addr.is_unspecified() || net.addr.is_multicast() || net.addr.is_loopback() {
                return Err(self
                    .error(
                        value.span(),
                        &field,
                        format!("{} cannot be an interface address", net.addr),
                    )
                    .with_hint("use a unicast address of the tunnel's subnet"));
            }
            if addresses.iter().any(|a| a.addr == net.addr) {
                return Err(self
                    .error(
                        value.span(),
                        &field,
                        format!("{} is listed twice", net.addr),
                    )
                    .with_hint("remove the duplicate"));
            }
            addresses.push(net);
        }

        let mtu = match &tun.mtu {
            Some(value) => {
                let mtu = *value.get_ref();
                if !(MIN_MTU..=i64::from(u16::MAX)).contains(&mtu) {
                    return Err(self
                        .error(value.span(), "tun.mtu", format!("{mtu} bytes is out of range"))
                        .with_hint(format!(
                            "use a value from {MIN_MTU} to 65535 bytes, or remove mtu to let the daemon \
                             derive it from the smallest path MTU"
                        )));
                }
                if mtu < MIN_IPV6_MTU && addresses.iter().any(|a| a.addr.is_ipv6()) {
                    return Err(self
                        .error(
                            value.span(),
                            "tun.mtu",
                            format!("{mtu} bytes is below the IPv6 minimum of {MIN_IPV6_MTU}, and [tun] has an IPv6 address"),
                        )
                        .with_hint("raise mtu to at least 1280, remove it to let the daemon choose, or drop the IPv6 address"));
                }
                Some(u16::try_from(mtu).unwrap_or(u16::MAX))
            }
            None => None,
        };
        Ok(TunConfig {
            name,
            addresses,
            mtu,
        })
    }

    pub(super) fn scheduler(&self, raw: &Option<Sp<RawScheduler>>) -> Result<SchedulerConfig> {
        let value = raw.as_ref().and_then(|r| r.get_ref().name.as_ref());
        let choice = self.parsed_name(
            value,
            "scheduler.name",
            "scheduler",
            KNOWN_SCHEDULERS,
            DEFAULT_SCHEDULER,
        )?;
        let empty = RawScheduler::default();
        let scheduler = raw.as_ref().map_or(&empty, |r| r.get_ref());
        let duplicate_latency_critical = scheduler
            .duplicate_latency_critical
            .as_ref()
            .map_or(DEFAULT_DUPLICATE_LATENCY_CRITICAL, |value| *value.get_ref());
        let parity_on_lossy_paths = scheduler
            .parity_on_lossy_paths
            .as_ref()
            .map_or(DEFAULT_PARITY_ON_LOSSY_PATHS, |value| *value.get_ref());
        // Every parameter is checked, whichever scheduler reads it, so a bad value
        // is reported now rather than after a later change of scheduler. The ranges
        // are the schedulers' own (`mptund_sched`); nothing checks them again.
        let micros = |range: &RangeInclusive<Duration>| {
            i64::try_from(range.start().as_micros()).unwrap_or(i64::MAX)
                ..=i64::try_from(range.end().as_micros()).unwrap_or(i64::MAX)
        };
        // Absent: earliest-arrival never waits for a full path.
        let wait_margin = match scheduler.earliest_arrival_wait_margin_us.as_ref() {
            Some(value) => Some(Duration::from_micros(self.integer(
                Some(value),
                "scheduler.earliest_arrival_wait_margin_us",
                micros(&EARLIEST_ARRIVAL_WAIT_MARGIN_RANGE),
                " µs",
                0,
            )? as u64)),
            None => None,
        };
        let share_range = &EARLIEST_ARRIVAL_SHARE_PERCENT_RANGE;
        let share_percent = self.integer(
            scheduler.earliest_arrival_share_percent.as_ref(),
            "scheduler.earliest_arrival_share_percent",
            i64::from(*share_range.start())..=i64::from(*share_range.end()),
            " %",
            i64::from(EarliestArrivalParams::DEFAULT.share_percent),
        )? as u16;
        let hysteresis = self.fraction(
            scheduler.ecf_hysteresis.as_ref(),
            "scheduler.ecf_hysteresis",
            ECF_HYSTERESIS_RANGE,
            EcfParams::DEFAULT.hysteresis,
        )?;
        let lambda = self.fraction(
            scheduler.blest_lambda.as_ref(),
            "scheduler.blest_lambda",
            BLEST_LAMBDA_RANGE,
            BlestParams::DEFAULT.lambda,
        )?;
        let choice = match choice {
            SchedulerChoice::EarliestArrival(defaults) => {
                SchedulerChoice::EarliestArrival(EarliestArrivalParams {
                    wait_margin,
                    share_percent,
                    ..defaults
                })
            }
            SchedulerChoice::Blest(defaults) => {
                SchedulerChoice::Blest(BlestParams { lambda, ..defaults })
            }
            SchedulerChoice::Ecf(_) => SchedulerChoice::Ecf(EcfParams { hysteresis }),
            untuned => untuned,
        };
        Ok(SchedulerConfig {
            choice,
            duplicate_latency_critical,
            parity_on_lossy_paths,
        })
    }

    /// An optional decimal number within `range`, or `default`.
    fn fraction(
        &self,
        value: Option<&Sp<f64>>,
        field: &str,
        range: RangeInclusive<f64>,
        default: f64,
    ) -> Result<f64> {
        let Some(value) = value else {
            return Ok(default);
        };
        let number = *value.get_ref();
        if range.contains(&number) {
            return Ok(number);
        }
        Err(self
            .error(value.span(), field, format!("{number} is out of range"))
            .with_hint(format!(
                "use a value from {} to {} (default {default})",
                range.start(),
                range.end()
            )))
    }

    /// An optional name that must be one of `known`, or `default`.
    pub(super) fn known_name(
        &self,
        value: Option<&Sp<String>>,
        field: &str,
        what: &str,
        known: &[&str],
        default: &str,
    ) -> Result<String> {
        let Some(value) = value else {
            return Ok(default.to_string());
        };
        let name = value.get_ref();
        if known.contains(&name.as_str()) {
            return Ok(name.clone());
        }
        Err(self.unknown_name(value, field, what, known))
    }

    /// An optional name parsed into what it names, or `default`; `known` lists the
    /// names `T` parses, for the hint.
    pub(super) fn parsed_name<T: std::str::FromStr>(
        &self,
        value: Option<&Sp<String>>,
        field: &str,
        what: &str,
        known: &[&str],
        default: T,
    ) -> Result<T> {
        let Some(value) = value else {
            return Ok(default);
        };
        value
            .get_ref()
            .parse()
            .map_err(|_| self.unknown_name(value, field, what, known))
    }

    /// "unknown `what`" at `value`, with the closest of `known` and the full list.
    fn unknown_name(
        &self,
        value: &Sp<String>,
        field: &str,
        what: &str,
        known: &[&str],
    ) -> ConfigError {
        let name = value.get_ref();
        let listed: Vec<String> = known.iter().map(|k| format!("{k:?}")).collect();
        let hint = match suggest::closest(name, known.iter().copied()) {
            Some(candidate) => format!(
                "did you mean {candidate:?}? known {what}s: {}",
                listed.join(", ")
            ),
            None => format!("known {what}s: {}", listed.join(", ")),
        };
        self.error(value.span(), field, format!("unknown {what} {name:?}"))
            .with_hint(hint)
    }

    pub(super) fn congestion(&self, raw: &Option<Sp<RawCongestion>>) -> Result<CongestionConfig> {
        let empty = RawCongestion::default();
        let congestion = raw.as_ref().map_or(&empty, |c| c.get_ref());
        let controller = self.parsed_name(
            congestion.controller.as_ref(),
            "congestion.controller",
            "congestion controller",
            KNOWN_CONTROLLERS,
            DEFAULT_CONTROLLER,
        )?;
        let capacity = self.integer(
            congestion.queue_capacity_packets.as_ref(),
            "congestion.queue_capacity_packets",
            16..=65_536,
            " packets",
            i64::try_from(DEFAULT_QUEUE_CAPACITY_PACKETS).unwrap_or(i64::MAX),
        )?;
        let queue_max_delay = self.millis(
            congestion.queue_max_delay_ms.as_ref(),
            "congestion.queue_max_delay_ms",
            1..=10_000,
            DEFAULT_QUEUE_MAX_DELAY,
        )?;
        let queue_target_delay = self.millis(
            congestion.queue_target_delay_ms.as_ref(),
            "congestion.queue_target_delay_ms",
            1..=1_000,
            DEFAULT_QUEUE_TARGET_DELAY,
        )?;
        let queue_interval = self.millis(
            congestion.queue_interval_ms.as_ref(),
            "congestion.queue_interval_ms",
            1..=10_000,
            DEFAULT_QUEUE_INTERVAL,
        )?;
        Ok(CongestionConfig {
            controller,
            queue_capacity_packets: usize::try_from(capacity)
                .unwrap_or(DEFAULT_QUEUE_CAPACITY_PACKETS),
            queue_max_delay,
            queue_target_delay,
            queue_interval,
        })
    }

    pub(super) fn reorder(&self, raw: &Option<Sp<RawReorder>>) -> Result<ReorderConfig> {
        let empty = RawReorder::default();
        let reorder = raw.as_ref().map_or(&empty, |r| r.get_ref());
        let max_hold = self.millis(
            reorder.max_hold_ms.as_ref(),
            "reorder.max_hold_ms",
            1..=5_000,
            DEFAULT_REORDER_MAX_HOLD,
        )?;
        let min_hold = self.millis(
            reorder.min_hold_ms.as_ref(),
            "reorder.min_hold_ms",
            0..=5_000,
            DEFAULT_REORDER_MIN_HOLD.min(max_hold),
        )?;
        if let Some(value) = reorder.min_hold_ms.as_ref().filter(|_| min_hold > max_hold) {
            return Err(self
                .error(
                    value.span(),
                    "reorder.min_hold_ms",
                    format!(
                        "min_hold_ms ({} ms) is above max_hold_ms ({} ms)",
                        min_hold.as_millis(),
                        max_hold.as_millis()
                    ),
                )
                .with_hint("lower min_hold_ms or raise max_hold_ms"));
        }
        let adaptive = reorder
            .adaptive
            .as_ref()
            .is_none_or(|value| *value.get_ref());
        let equalize_delay = EqualizeScope::from_config_name(&self.known_name(
            reorder.equalize_delay.as_ref(),
            "reorder.equalize_delay",
            "delay equalization",
            &EqualizeScope::CONFIG_NAMES,
            DEFAULT_EQUALIZE_DELAY,
        )?);
        let equalize_percent = self.integer(
            reorder.equalize_percent.as_ref(),
            "reorder.equalize_percent",
            0..=100,
            " %",
            i64::from(DEFAULT_EQUALIZE_PERCENT),
        )?;
        let capacity = self.integer(
            reorder.capacity_packets.as_ref(),
            "reorder.capacity_packets",
            16..=1_048_576,
            " packets",
            i64::try_from(DEFAULT_REORDER_CAPACITY_PACKETS).unwrap_or(i64::MAX),
        )?;
        Ok(ReorderConfig {
            adaptive,
            equalize_delay,
            equalize_percent: u8::try_from(equalize_percent).unwrap_or(DEFAULT_EQUALIZE_PERCENT),
            min_hold,
            max_hold,
            capacity_packets: usize::try_from(capacity).unwrap_or(DEFAULT_REORDER_CAPACITY_PACKETS),
        })
    }

    pub(super) fn timers(&self, raw: &Option<Sp<RawTimers>>) -> Result<Timers> {
        let empty = RawTimers::default();
        let timers = raw.as_ref().map_or(&empty, |t| t.get_ref());
        let keepalive_interval = self.millis(
            timers.keepalive_interval_ms.as_ref(),
            "timers.keepalive_interval_ms",
            100..=60_000,
            DEFAULT_KEEPALIVE_INTERVAL,
        )?;
        let path_timeout = self.millis(
            timers.path_timeout_ms.as_ref(),
            "timers.path_timeout_ms",
            100..=600_000,
            DEFAULT_PATH_TIMEOUT,
        )?;
        if path_timeout <= keepalive_interval {
            let (span, field) = match (
                timers.path_timeout_ms.as_ref(),
                &timers.keepalive_interval_ms,
            ) {
                (Some(value), _) => (Some(value.span()), "timers.path_timeout_ms"),
                (None, Some(value)) => (Some(value.span()), "timers.keepalive_interval_ms"),
                (None, None) => (None, "timers.path_timeout_ms"),
            };
            let problem = format!(
                "path_timeout_ms ({}) must be greater than keepalive_interval_ms ({})",
                path_timeout.as_millis(),
                keepalive_interval.as_millis()
            );
            let err = match span {
                Some(span) => self.error(span, field, problem),
                None => self.src.error_unplaced(field, problem),
            };
            return Err(err.with_hint(format!(
                "an idle path hears only keepalives; set path_timeout_ms to about three keepalive intervals, e.g. {}",
                keepalive_interval.as_millis() * 3
            )));
        }
        let handshake_retry = self.millis(
            timers.handshake_retry_ms.as_ref(),
            "timers.handshake_retry_ms",
            100..=60_000,
            DEFAULT_HANDSHAKE_RETRY,
        )?;
        let probe_interval = self.millis(
            timers.probe_interval_ms.as_ref(),
            "timers.probe_interval_ms",
            20..=60_000,
            DEFAULT_PROBE_INTERVAL,
        )?;
        let max_ack_delay = self.millis(
            timers.max_ack_delay_ms.as_ref(),
            "timers.max_ack_delay_ms",
            1..=1_000,
            DEFAULT_MAX_ACK_DELAY,
        )?;

        // Each mode has its own session timer; the other one is a mistake.
        let (own, other, key, other_key, range, default) = match self.mode {
            Mode::Client => (
                &timers.session_timeout_ms,
                &timers.session_idle_timeout_ms,
                "session_timeout_ms",
                "session_idle_timeout_ms",
                1_000..=3_600_000,
                DEFAULT_SESSION_TIMEOUT,
            ),
            Mode::Server => (
                &timers.session_idle_timeout_ms,
                &timers.session_timeout_ms,
                "session_idle_timeout_ms",
                "session_timeout_ms",
                1_000..=86_400_000,
                DEFAULT_SESSION_IDLE_TIMEOUT,
            ),
        };
        if let Some(value) = other {
            return Err(self
                .error(
                    value.span(),
                    &format!("timers.{other_key}"),
                    format!("`{other_key}` is not a {} setting", self.mode),
                )
                .with_hint(format!("the {} counterpart is `{key}`", self.mode)));
        }
        let field = format!("timers.{key}");
        let session = self.millis(own.as_ref(), &field, range, default)?;
        if session < path_timeout {
            let problem = format!(
                "{key} ({}) is shorter than path_timeout_ms ({})",
                session.as_millis(),
                path_timeout.as_millis()
            );
            let err = match own {
                Some(value) => self.error(value.span(), &field, problem),
                None => self.src.error_unplaced(&field, problem),
            };
            return Err(err.with_hint(format!(
                "a session should outlive its paths; set {key} to at least {}",
                path_timeout.as_millis()
            )));
        }
        let (session_timeout, session_idle_timeout) = match self.mode {
            Mode::Client => (session, DEFAULT_SESSION_IDLE_TIMEOUT),
            Mode::Server => (DEFAULT_SESSION_TIMEOUT, session),
        };
        Ok(Timers {
            keepalive_interval,
            path_timeout,
            handshake_retry,
            probe_interval,
            max_ack_delay,
            session_timeout,
            session_idle_timeout,
            key_lifetime: self.key_lifetime(timers)?,
        })
    }

    /// Renewal must come before rejection, by time and by count, or a session
    /// would lose its keys before replacing them.
    fn key_lifetime(&self, timers: &RawTimers) -> Result<KeyLifetime> {
        let defaults = KeyLifetime::default();
        let rekey_after_time = self.millis(
            timers.rekey_after_ms.as_ref(),
            "timers.rekey_after_ms",
            1_000..=86_400_000,
            defaults.rekey_after_time,
        )?;
        let reject_after_time = self.millis(
            timers.reject_after_ms.as_ref(),
            "timers.reject_after_ms",
            2_000..=86_400_000,
            defaults.reject_after_time,
        )?;
        if reject_after_time <= rekey_after_time {
            let field = "timers.reject_after_ms";
            let problem = format!(
                "reject_after_ms ({}) must be greater than rekey_after_ms ({})",
                reject_after_time.as_millis(),
                rekey_after_time.as_millis()
            );
            let err = match (&timers.reject_after_ms, &timers.rekey_after_ms) {
                (Some(value), _) => self.error(value.span(), field, problem),
                (None, Some(value)) => self.error(value.span(), "timers.rekey_after_ms", problem),
                (None, None) => self.src.error_unplaced(field, problem),
            };
            return Err(err.with_hint(format!(
                "leave time for the renewal handshake: WireGuard rejects keys 60 s after renewing them, e.g. reject_after_ms = {}",
                rekey_after_time.as_millis() * 3 / 2
            )));
        }
        let count = |value: Option<&Sp<i64>>, field: &str, default: u64| {
            let default = i64::try_from(default).unwrap_or(i64::MAX);
            self.integer(value, field, 1..=i64::MAX, " datagrams", default)
                .map(|count| u64::try_from(count).unwrap_or(0))
        };
        let rekey_after_messages = count(
            timers.rekey_after_messages.as_ref(),
            "timers.rekey_after_messages",
            defaults.rekey_after_messages,
        )?;
        // The default reject limit is beyond what TOML integers hold.
        let reject_after_messages = match &timers.reject_after_messages {
            None => defaults.reject_after_messages,
            Some(value) => count(
                Some(value),
                "timers.reject_after_messages",
                defaults.reject_after_messages,
            )?,
        };
        if reject_after_messages <= rekey_after_messages {
            let problem = format!(
                "reject_after_messages ({reject_after_messages}) must be greater than rekey_after_messages ({rekey_after_messages})"
            );
            let err = match (&timers.reject_after_messages, &timers.rekey_after_messages) {
                (Some(value), _) => {
                    self.error(value.span(), "timers.reject_after_messages", problem)
                }
                (None, Some(value)) => {
                    self.error(value.span(), "timers.rekey_after_messages", problem)
                }
                (None, None) => self
                    .src
                    .error_unplaced("timers.reject_after_messages", problem),
            };
            return Err(err.with_hint(format!(
                "set reject_after_messages to at least twice rekey_after_messages, e.g. {}",
                rekey_after_messages.saturating_mul(2)
            )));
        }
        Ok(KeyLifetime {
            rekey_after_time,
            rekey_after_messages,
            reject_after_time,
            reject_after_messages,
        })
    }

    /// `[handshake]` (server): when cookies start and each source's token bucket.
    pub(super) fn handshake(&self, raw: &Option<Sp<RawHandshake>>) -> Result<HandshakeLimits> {
        let defaults = HandshakeLimits::default();
        let Some(table) = raw else {
            return Ok(defaults);
        };
        let table = table.get_ref();
        let count = |value: Option<&Sp<i64>>, field: &str, max: i64, unit: &str, default: u32| {
            self.integer(value, field, 1..=max, unit, i64::from(default))
                .map(|count| u32::try_from(count).unwrap_or(default))
        };
        Ok(HandshakeLimits {
            load_threshold_per_s: count(
                table.load_threshold_per_s.as_ref(),
                "handshake.load_threshold_per_s",
                1_000_000,
                " inits/s",
                defaults.load_threshold_per_s,
            )?,
            rate_per_source_per_s: count(
                table.rate_per_source_per_s.as_ref(),
                "handshake.rate_per_source_per_s",
                100_000,
                " inits/s",
                defaults.rate_per_source_per_s,
            )?,
            burst_per_source: count(
                table.burst_per_source.as_ref(),
                "handshake.burst_per_source",
                100_000,
                " inits",
                defaults.burst_per_source,
            )?,
        })
    }

    /// `[limits]` (server): paths per session and the memory budget the sessions share.
    pub(super) fn limits(&self, raw: &Option<Sp<RawLimits>>) -> Result<ServerLimits> {
        let defaults = ServerLimits::default();
        let Some(table) = raw else {
            return Ok(defaults);
        };
        let table = table.get_ref();
        let max_paths = self.integer(
            table.max_paths_per_session.as_ref(),
            "limits.max_paths_per_session",
            1..=MAX_PATHS as i64,
            " paths",
            defaults.max_paths_per_session as i64,
        )?;
        let budget_mib = self.integer(
            table.memory_budget_mib.as_ref(),
            "limits.memory_budget_mib",
            MIN_MEMORY_BUDGET_MIB..=1 << 20,
            " MiB",
            (defaults.memory_budget_bytes >> 20) as i64,
        )?;
        Ok(ServerLimits {
            max_paths_per_session: usize::try_from(max_paths)
                .unwrap_or(defaults.max_paths_per_session),
            memory_budget_bytes: u64::try_from(budget_mib).unwrap_or(0) << 20,
        })
    }

    pub(super) fn log(&self, raw: &Option<Sp<RawLog>>) -> Result<LogConfig> {
        let stats = raw
            .as_ref()
            .and_then(|l| l.get_ref().stats_interval_ms.as_ref());
        let stats_interval = match stats {
            None => Some(DEFAULT_STATS_INTERVAL),
            Some(value) if *value.get_ref() == 0 => None,
            Some(value) => Some(self.millis(
                Some(value),
                "log.stats_interval_ms",
                1_000..=86_400_000,
                DEFAULT_STATS_INTERVAL,
            )?),
        };
        Ok(LogConfig { stats_interval })
    }

    /// `[metrics]`: absent means no metrics endpoint; present means one on
    /// `listen` (loopback by default) unless `enabled = false`. An endpoint that
    /// other hosts can reach without a token is a warning.
    pub(super) fn metrics(&mut self, raw: &Option<Sp<RawMetrics>>) -> Result<MetricsConfig> {
        let Some(table) = raw else {
            return Ok(MetricsConfig::off());
        };
        let metrics = table.get_ref();
        if metrics.enabled.as_ref().is_some_and(|e| !*e.get_ref()) {
            return Ok(MetricsConfig::off());
        }
        let listen = match &metrics.listen {
            None => DEFAULT_METRICS_LISTEN,
            Some(value) => {
                let text = value.get_ref().trim();
                let addr: SocketAddr = text.parse().map_err(|_| {
                    self.error(
                        value.span(),
                        "metrics.listen",
                        format!("{:?} is not an address:port", shorten(text)),
                    )
                    .with_hint(
                        "write the TCP address and port to serve /metrics on, e.g. \"127.0.0.1:9477\" \
                         (this host only) or \"[::]:9477\" (every address; set bearer_token_file \
                         and firewall it)",
                    )
                })?;
                if addr.port() == 0 || addr.ip().is_multicast() {
                    return Err(self
                        .error(
                            value.span(),
                            "metrics.listen",
                            format!("{addr} cannot be listened on"),
                        )
                        .with_hint("give a unicast or unspecified address and a port, e.g. \"127.0.0.1:9477\""));
                }
                addr
            }
        };
        let max_connections = self.integer(
            metrics.max_connections.as_ref(),
            "metrics.max_connections",
            1..=MAX_METRICS_CONNECTIONS,
            " connections",
            DEFAULT_METRICS_MAX_CONNECTIONS as i64,
        )?;
        let bearer_token = match &metrics.bearer_token_file {
            Some(value) => Some(self.bearer_token(value)?),
            None => None,
        };
        if bearer_token.is_none() && !listen.ip().is_loopback() {
            let place = match &metrics.listen {
                Some(value) => format!(
                    "{}:{}",
                    self.src.file.display(),
                    self.line_of(&value.span())
                ),
                None => self.src.file.display().to_string(),
            };
            self.warnings.push(format!(
                "{place}: metrics.listen: {listen} serves /metrics to every host that can reach it, \
                 without a token; set metrics.bearer_token_file (Prometheus sends the token with \
                 `authorization: {{ credentials_file: ... }}`) or listen on 127.0.0.1"
            ));
        }
        Ok(MetricsConfig {
            listen: Some(listen),
            bearer_token,
            max_connections: usize::try_from(max_connections)
                .unwrap_or(DEFAULT_METRICS_MAX_CONNECTIONS),
        })
    }

    /// `[control]`: the control socket is on by default, at a path derived
    /// from the configuration file's name.
    pub(super) fn control(&self, raw: &Option<Sp<RawControl>>) -> Result<ControlConfig> {
        let empty = RawControl::default();
        let control = raw.as_ref().map_or(&empty, |c| c.get_ref());
        if control.enabled.as_ref().is_some_and(|e| !*e.get_ref()) {
            return Ok(ControlConfig { socket: None });
        }
        let socket = match &control.socket {
            None => default_control_socket(self.src.file),
            Some(value) => {
                let text = value.get_ref();
                // sockaddr_un holds 108 bytes with the terminating NUL.
                const MAX_SOCKET_PATH_BYTES: usize = 107;
                if text.trim().is_empty() {
                    return Err(self
                        .error(value.span(), "control.socket", "is empty")
                        .with_hint(
                            "give the socket's path, e.g. \"/run/mptund/client.sock\", or write \
                             `enabled = false` to switch the control socket off",
                        ));
                }
                let path = self.base_dir.join(text);
                if path.as_os_str().len() > MAX_SOCKET_PATH_BYTES {
                    return Err(self
                        .error(
                            value.span(),
                            "control.socket",
                            format!(
                                "{} is {} bytes long, more than a Unix socket path may be ({MAX_SOCKET_PATH_BYTES})",
                                shorten(&path.display().to_string()),
                                path.as_os_str().len()
                            ),
                        )
                        .with_hint("choose a shorter path, e.g. under /run/mptund/"));
                }
                path
            }
        };
        Ok(ControlConfig {
            socket: Some(socket),
        })
    }
}
