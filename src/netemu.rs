//! Emulated hosts, as the sizing studies ran them on one machine: each
//! host's OSDs in a network namespace of their own, joined by a veth pair
//! to a bridge in a hub namespace where the monitor, the MDS, the S3
//! gateway and the clients run; `tc` on both ends of each pair limits the
//! host's link (`tbf` for the rate, `netem` for the delay), and taking the
//! host's end down cuts it off silently (a partition: its peers see no
//! reset, only silence).
//!
//! Every server still binds a loopback address, as this project's servers
//! must: the hub is 127.0.3.254 and host N is 127.0.3.(N + 1), with
//! `route_localnet` on so the kernel routes them over the veths. Without
//! namespaces (`--hosts` alone), hosts are only labels in the map, which
//! is enough for host failure domains.
//!
//! The layout is kept in the data dir (`network.toml`), so a later `cairn
//! up` recreates the namespaces and `cairn down` removes them; the client
//! config names the hub (`netns`), and every `cairn` command that reads it
//! enters the hub before it connects.

use crate::bench_emulate::LimitCheck;
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// The layout's file in the data dir.
const LAYOUT_FILE: &str = "network.toml";
/// The emulated network's /24.
const SUBNET: &str = "127.0.3";
/// The hub's address on the bridge.
const HUB_IP: &str = "127.0.3.254";
/// Most emulated hosts (addresses 127.0.3.1 to .200).
pub(crate) const HOSTS_MAX: u32 = 200;
/// How long a link's rate is measured.
const RATE_CHECK: Duration = Duration::from_millis(1500);
/// Round trips timed to check a delay.
const RTT_SAMPLES: usize = 20;
/// A measured rate may exceed its limit by this much (the token bucket's
/// burst at the start).
const OVERSHOOT_MAX: f64 = 1.25;
/// Environment variable naming the namespace a `cairn` process enters
/// first thing (the supervisor sets it for each OSD of a host).
pub(crate) const NETNS_ENV: &str = "CAIRN_NETNS";

/// Where a cluster's hosts are and what their links are like.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Layout {
    /// Emulated hosts; OSD N is on host N mod `hosts`. 0: no hosts, every
    /// OSD on `localhost`.
    pub hosts: u32,
    /// Each host in its own network namespace.
    pub netns: bool,
    /// The namespaces' names start with this (unique per cluster on the
    /// machine: it holds the monitor's port).
    pub tag: String,
    /// Each host link's rate, bits per second, each way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_bits: Option<u64>,
    /// Each host link's one-way delay, microseconds, each way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_us: Option<u64>,
}

impl Layout {
    /// The layout `cairn up` left in `dir`; none (every OSD on
    /// `localhost`) if it left none.
    pub(crate) fn load(dir: &Path) -> Result<Layout, String> {
        let path = dir.join(LAYOUT_FILE);
        match std::fs::read_to_string(&path) {
            Ok(text) => toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Layout::default()),
            Err(e) => Err(format!("{}: {e}", path.display())),
        }
    }

    pub(crate) fn save(&self, dir: &Path) -> Result<(), String> {
        let path = dir.join(LAYOUT_FILE);
        let text = toml::to_string(self).map_err(|e| e.to_string())?;
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The host `osd.INDEX` is on, if there are hosts.
    pub(crate) fn host_of(&self, index: u16) -> Option<u32> {
        (self.hosts > 0).then(|| u32::from(index) % self.hosts)
    }

    /// The host name `osd.INDEX` reports to the monitor.
    pub(crate) fn host_name(&self, index: u16) -> String {
        self.host_of(index)
            .map_or_else(|| "localhost".to_owned(), |h| format!("host{h}"))
    }

    /// The address `osd.INDEX` binds.
    pub(crate) fn osd_ip(&self, index: u16) -> String {
        match self.host_of(index).filter(|_| self.netns) {
            Some(h) => host_ip(h),
            None => "127.0.0.1".to_owned(),
        }
    }

    /// The address of the monitor, the MDS and the gateway.
    pub(crate) fn hub_ip(&self) -> &'static str {
        if self.netns { HUB_IP } else { "127.0.0.1" }
    }

    /// The hub namespace, where the clients run; none without namespaces.
    pub(crate) fn hub(&self) -> Option<String> {
        self.netns.then(|| self.tag.clone())
    }

    /// The namespace of `osd.INDEX`, if hosts have namespaces.
    pub(crate) fn osd_netns(&self, index: u16) -> Option<String> {
        self.host_of(index)
            .filter(|_| self.netns)
            .map(|h| self.host_ns(h))
    }

    pub(crate) fn host_ns(&self, host: u32) -> String {
        format!("{}-h{host}", self.tag)
    }

    /// Host `host`'s veth ends: in its namespace, and on the hub's bridge.
    fn veth(&self, host: u32) -> (String, String) {
        let short = self.tag.trim_start_matches("cairn");
        (format!("c{short}h{host}"), format!("c{short}h{host}p"))
    }

    fn bridge(&self) -> String {
        format!("c{}br", self.tag.trim_start_matches("cairn"))
    }

    /// Makes the namespaces, the bridge and the links, and applies the
    /// limits; what an earlier run left under the same names goes first.
    pub(crate) fn create(&self) -> Result<(), String> {
        if !rustix::process::geteuid().is_root() {
            return Err("emulated hosts in network namespaces need root".into());
        }
        // What an earlier run left goes, unless something still runs in
        // it (another cluster on this port, in another data dir).
        for ns in std::iter::once(self.tag.clone()).chain((0..self.hosts).map(|h| self.host_ns(h)))
        {
            let out = Command::new("ip").args(["netns", "pids", &ns]).output();
            if let Ok(out) = out
                && !out.stdout.is_empty()
            {
                return Err(format!(
                    "network namespace {ns} has processes in it: another cluster runs on this port; stop it (`cairn down`) or give another --base-port"
                ));
            }
        }
        self.destroy();
        let result = self.build();
        if result.is_err() {
            self.destroy();
        }
        result
    }

    fn build(&self) -> Result<(), String> {
        let hub = self.tag.clone();
        let bridge = self.bridge();
        ip(&["netns", "add", &hub])?;
        ip(&["-n", &hub, "link", "set", "lo", "up"])?;
        ip(&["-n", &hub, "link", "add", &bridge, "type", "bridge"])?;
        ip(&[
            "-n",
            &hub,
            "addr",
            "add",
            &format!("{HUB_IP}/24"),
            "dev",
            &bridge,
        ])?;
        localnet(&hub, &["all", "default", bridge.as_str()])?;
        ip(&["-n", &hub, "link", "set", &bridge, "up"])?;
        for host in 0..self.hosts {
            let ns = self.host_ns(host);
            let (inner, outer) = self.veth(host);
            ip(&["netns", "add", &ns])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
            ip(&[
                "link", "add", &inner, "type", "veth", "peer", "name", &outer,
            ])?;
            ip(&["link", "set", &inner, "netns", &ns])?;
            ip(&["link", "set", &outer, "netns", &hub])?;
            ip(&["-n", &hub, "link", "set", &outer, "master", &bridge])?;
            localnet(&hub, &[outer.as_str()])?;
            ip(&["-n", &hub, "link", "set", &outer, "up"])?;
            localnet(&ns, &["all", "default", inner.as_str()])?;
            let addr = format!("{}/24", host_ip(host));
            ip(&["-n", &ns, "addr", "add", &addr, "dev", &inner])?;
            ip(&["-n", &ns, "link", "set", &inner, "up"])?;
            for (side, dev) in [(&ns, &inner), (&hub, &outer)] {
                self.shape(side, dev)?;
            }
        }
        Ok(())
    }

    /// The link's limits on one end (its egress): `tbf` for the rate,
    /// `netem` under it for the delay.
    fn shape(&self, ns: &str, dev: &str) -> Result<(), String> {
        let mut netem_parent = vec!["root"];
        if let Some(bits) = self.rate_bits {
            // A burst of 20 ms at the rate (at least 32 KiB), as tbf needs
            // at least a timer tick's worth.
            let burst = (bits / 8 / 50).max(32 * 1024).to_string();
            tc(&[
                "-n",
                ns,
                "qdisc",
                "replace",
                "dev",
                dev,
                "root",
                "handle",
                "1:",
                "tbf",
                "rate",
                &format!("{bits}bit"),
                "burst",
                &burst,
                "latency",
                "100ms",
            ])?;
            netem_parent = vec!["parent", "1:1"];
        }
        if let Some(us) = self.delay_us {
            let mut args = vec!["-n", ns, "qdisc", "replace", "dev", dev];
            args.extend(netem_parent);
            let delay = format!("{us}us");
            args.extend(["handle", "10:", "netem", "delay", &delay, "limit", "100000"]);
            tc(&args).map_err(|e| format!("{e} (the delay needs the kernel's netem)"))?;
        }
        Ok(())
    }

    /// Removes the namespaces (their links and daemons' sockets go with
    /// them). Quiet: what is missing was never made.
    pub(crate) fn destroy(&self) {
        for host in 0..self.hosts {
            drop(ip(&["netns", "del", &self.host_ns(host)]));
        }
        drop(ip(&["netns", "del", &self.tag]));
    }

    /// Cuts host `host` off (its link down: silence for its peers), or
    /// joins it again.
    pub(crate) fn cut(&self, host: u32, cut: bool) -> Result<(), String> {
        if !self.netns || host >= self.hosts {
            return Err(format!(
                "host{host} has no link to cut ({} emulated hosts{})",
                self.hosts,
                if self.netns {
                    ""
                } else {
                    ", without namespaces"
                }
            ));
        }
        let (inner, _) = self.veth(host);
        let state = if cut { "down" } else { "up" };
        ip(&["-n", &self.host_ns(host), "link", "set", &inner, state])
    }

    /// Measures host 0's link from the hub, each limit against what was
    /// asked; an error if a limit did not take effect.
    pub(crate) fn check(&self) -> Result<Vec<LimitCheck>, String> {
        let mut checks = Vec::new();
        if self.hosts == 0 || !self.netns {
            return Ok(checks);
        }
        let host = self.host_ns(0);
        let hub = self.tag.clone();
        if let Some(bits) = self.rate_bits {
            let measured = measure_rate(&hub, &host, &host_ip(0))?;
            let wanted = bits as f64 / 8.0;
            let applied = measured <= wanted * OVERSHOOT_MAX;
            checks.push(LimitCheck {
                limit: "net_rate".into(),
                value: format!("{} each way", rate_text(bits)),
                mechanism: "tc tbf on both ends of each host's veth pair".into(),
                checked: format!(
                    "a TCP stream hub → host0 for {:.1} s: {:.1} MB/s",
                    RATE_CHECK.as_secs_f64(),
                    measured / 1e6
                ),
                applied,
            });
            if !applied {
                return Err(format!(
                    "the link rate {} did not take effect: {:.1} MB/s measured",
                    rate_text(bits),
                    measured / 1e6
                ));
            }
        }
        if let Some(us) = self.delay_us {
            let rtt = measure_rtt(&hub, &host, &host_ip(0))?;
            // Both ends delay: a round trip takes at least twice the delay.
            let wanted = Duration::from_micros(us * 2);
            let applied = rtt >= wanted.mul_f64(0.9);
            checks.push(LimitCheck {
                limit: "net_delay".into(),
                value: format!("{us} µs each way"),
                mechanism: "tc netem on both ends of each host's veth pair".into(),
                checked: format!(
                    "median TCP round trip hub ↔ host0 of {RTT_SAMPLES}: {} µs",
                    rtt.as_micros()
                ),
                applied,
            });
            if !applied {
                return Err(format!(
                    "the link delay did not take effect: round trips of {} µs for {us} µs each way",
                    rtt.as_micros()
                ));
            }
        }
        Ok(checks)
    }
}

/// Host `host`'s address.
fn host_ip(host: u32) -> String {
    format!("{SUBNET}.{}", host + 1)
}

/// `1gbit`, `100mbit`, `500kbit` or bits: bits per second.
pub(crate) fn parse_rate(text: &str) -> Result<u64, String> {
    let t = text.trim().to_ascii_lowercase();
    let bad = || format!("{text:?} is not a link rate like 1gbit, 100mbit or 10gbit");
    let digits_end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let value: u64 = t[..digits_end].parse().map_err(|_| bad())?;
    let scale: u64 = match &t[digits_end..] {
        "bit" | "" => 1,
        "kbit" => 1_000,
        "mbit" => 1_000_000,
        "gbit" => 1_000_000_000,
        _ => return Err(bad()),
    };
    value
        .checked_mul(scale)
        .filter(|&v| v >= 1_000_000)
        .ok_or_else(|| format!("{text:?}: a link rate is at least 1mbit"))
}

/// `100us` or `2ms`: a link's one-way delay, microseconds.
pub(crate) fn parse_delay(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let bad = || format!("{text:?} is not a link delay like 100us or 2ms");
    let (digits, scale) = if let Some(d) = t.strip_suffix("us") {
        (d, 1)
    } else if let Some(d) = t.strip_suffix("ms") {
        (d, 1_000)
    } else {
        return Err(bad());
    };
    let value: u64 = digits.parse().map_err(|_| bad())?;
    value
        .checked_mul(scale)
        .filter(|&us| us > 0 && us <= 10_000_000)
        .ok_or_else(|| format!("{text:?}: a link delay is 1us to 10s"))
}

/// `1gbit` for 10^9.
pub(crate) fn rate_text(bits: u64) -> String {
    match bits {
        b if b % 1_000_000_000 == 0 => format!("{}gbit", b / 1_000_000_000),
        b if b % 1_000_000 == 0 => format!("{}mbit", b / 1_000_000),
        b => format!("{b}bit"),
    }
}

/// Moves the calling thread into the named namespace: the sockets it opens
/// and the processes it starts afterwards are that namespace's.
pub(crate) fn enter(name: &str) -> Result<(), String> {
    let path = format!("/run/netns/{name}");
    let file = std::fs::File::open(&path).map_err(|e| {
        format!("network namespace {name}: {e} (is its cluster up? `cairn up` makes it)")
    })?;
    enter_file(&file).map_err(|e| format!("entering network namespace {name}: {e}"))
}

/// The calling thread's namespace, to come back to with [`enter_file`].
pub(crate) fn current() -> Result<std::fs::File, String> {
    std::fs::File::open("/proc/thread-self/ns/net").map_err(|e| format!("own namespace: {e}"))
}

pub(crate) fn enter_file(file: &std::fs::File) -> Result<(), String> {
    rustix::thread::move_into_link_name_space(
        std::os::fd::AsFd::as_fd(file),
        Some(rustix::thread::LinkNameSpaceType::Network),
    )
    .map_err(|e| e.to_string())
}

/// Fails, saying why, unless this machine can delay a link (`netem`):
/// tried on the loopback of a namespace made for the purpose.
pub(crate) fn probe_netem() -> Result<(), String> {
    let ns = format!("cairn-probe-{}", std::process::id());
    ip(&["netns", "add", &ns])?;
    let result = tc(&[
        "-n", &ns, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms",
    ]);
    drop(ip(&["netns", "del", &ns]));
    result.map_err(|e| format!("this kernel cannot delay a link (tc netem: {e})"))
}

fn ip(args: &[&str]) -> Result<(), String> {
    run("ip", args)
}

fn tc(args: &[&str]) -> Result<(), String> {
    run("tc", args)
}

fn run(program: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("{program}: {e} (install iproute2)"))?;
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "{program} {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    ))
}

/// `route_localnet` on the namespace's interfaces `devs`, so 127.x
/// addresses route over them.
fn localnet(ns: &str, devs: &[&str]) -> Result<(), String> {
    for dev in devs {
        let key = format!("net.ipv4.conf.{dev}.route_localnet=1");
        run("ip", &["netns", "exec", ns, "sysctl", "-qw", &key])?;
    }
    Ok(())
}

/// A listener in namespace `server_ns` on `ip`, and a client in
/// `client_ns` that runs `talk` against it; the server runs `serve` on
/// the connection.
fn across<T: Send + 'static>(
    server_ns: &str,
    client_ns: &str,
    ip: &str,
    serve: impl FnOnce(TcpStream) -> std::io::Result<()> + Send + 'static,
    talk: impl FnOnce(TcpStream) -> std::io::Result<T> + Send + 'static,
) -> Result<T, String> {
    let (server_ns, client_ns, ip) = (server_ns.to_owned(), client_ns.to_owned(), ip.to_owned());
    let (port_tx, port_rx) = std::sync::mpsc::channel();
    let server = std::thread::spawn(move || -> Result<(), String> {
        enter(&server_ns)?;
        let listener = TcpListener::bind((ip.as_str(), 0)).map_err(|e| e.to_string())?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        if port_tx.send(addr).is_err() {
            return Ok(());
        }
        let (stream, _) = listener.accept().map_err(|e| e.to_string())?;
        serve(stream).map_err(|e| e.to_string())
    });
    let addr = port_rx
        .recv_timeout(Duration::from_secs(5))
        .map_err(|_| "the check's listener did not start".to_owned());
    let client = addr.and_then(|addr| {
        std::thread::spawn(move || -> Result<T, String> {
            enter(&client_ns)?;
            let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
                .map_err(|e| format!("connecting to {addr}: {e}"))?;
            stream
                .set_read_timeout(Some(Duration::from_secs(10)))
                .map_err(|e| e.to_string())?;
            talk(stream).map_err(|e| e.to_string())
        })
        .join()
        .map_err(|_| "the check's client panicked".to_owned())?
    });
    let served = server
        .join()
        .map_err(|_| "the check's server panicked".to_owned())?;
    let value = client?;
    served?;
    Ok(value)
}

/// Bytes per second a TCP stream gets from `client_ns` to `ip` in
/// `server_ns`.
fn measure_rate(client_ns: &str, server_ns: &str, ip: &str) -> Result<f64, String> {
    let serve = |mut stream: TcpStream| -> std::io::Result<()> {
        let mut buf = vec![0u8; 1 << 16];
        let mut total = 0u64;
        loop {
            let n = stream.read(&mut buf)?;
            if n == 0 {
                break;
            }
            total += n as u64;
        }
        stream.write_all(&total.to_le_bytes())
    };
    let talk = |mut stream: TcpStream| -> std::io::Result<f64> {
        let chunk = vec![0x5au8; 1 << 16];
        let start = Instant::now();
        while start.elapsed() < RATE_CHECK {
            stream.write_all(&chunk)?;
        }
        stream.shutdown(std::net::Shutdown::Write)?;
        let mut total = [0u8; 8];
        stream.read_exact(&mut total)?;
        Ok(u64::from_le_bytes(total) as f64 / start.elapsed().as_secs_f64())
    };
    across(server_ns, client_ns, ip, serve, talk)
}

/// The median round trip of one byte from `client_ns` to `ip` in
/// `server_ns` and back.
fn measure_rtt(client_ns: &str, server_ns: &str, ip: &str) -> Result<Duration, String> {
    let serve = |mut stream: TcpStream| -> std::io::Result<()> {
        stream.set_nodelay(true)?;
        let mut byte = [0u8; 1];
        while stream.read(&mut byte)? == 1 {
            stream.write_all(&byte)?;
        }
        Ok(())
    };
    let talk = |mut stream: TcpStream| -> std::io::Result<Duration> {
        stream.set_nodelay(true)?;
        let mut rtts = Vec::with_capacity(RTT_SAMPLES);
        let mut byte = [1u8; 1];
        for _ in 0..RTT_SAMPLES {
            let start = Instant::now();
            stream.write_all(&byte)?;
            stream.read_exact(&mut byte)?;
            rtts.push(start.elapsed());
        }
        rtts.sort_unstable();
        Ok(rtts[RTT_SAMPLES / 2])
    };
    across(server_ns, client_ns, ip, serve, talk)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_read_as_tc_writes_them() {
        assert_eq!(parse_rate("1gbit"), Ok(1_000_000_000));
        assert_eq!(parse_rate("100mbit"), Ok(100_000_000));
        assert_eq!(parse_rate("25Gbit"), Ok(25_000_000_000));
        assert!(parse_rate("1gb").is_err());
        assert!(parse_rate("500kbit").is_err(), "below 1mbit");
        assert_eq!(rate_text(10_000_000_000), "10gbit");
        assert_eq!(rate_text(100_000_000), "100mbit");
        assert_eq!(parse_delay("150us"), Ok(150));
        assert_eq!(parse_delay("2ms"), Ok(2_000));
        assert!(parse_delay("2").is_err() && parse_delay("0ms").is_err());
    }

    #[test]
    fn osds_spread_over_hosts_and_take_their_addresses() {
        let layout = Layout {
            hosts: 3,
            netns: true,
            tag: "cairn17000".into(),
            ..Layout::default()
        };
        assert_eq!(layout.host_name(4), "host1");
        assert_eq!(layout.osd_ip(4), "127.0.3.2");
        assert_eq!(layout.osd_netns(5).as_deref(), Some("cairn17000-h2"));
        assert_eq!(layout.hub_ip(), "127.0.3.254");
        let (inner, outer) = layout.veth(199);
        assert!(inner.len() <= 15 && outer.len() <= 15, "{outer}");
        let labels = Layout {
            netns: false,
            ..layout
        };
        assert_eq!(labels.osd_ip(4), "127.0.0.1");
        assert_eq!(labels.host_name(4), "host1");
        assert_eq!(labels.osd_netns(4), None);
        assert_eq!(Layout::default().host_name(4), "localhost");
    }
}
