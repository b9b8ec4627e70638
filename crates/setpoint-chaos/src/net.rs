//! The network between each host and the store: delay, loss, partitions.
//!
//! Each host has one link to the store with two directions, *up* (requests, host → store) and
//! *down* (replies and watch events, store → host). A message takes `delay_ms` plus a jitter
//! uniform in `0 ..= jitter_ms`, and each direction is FIFO, as one gRPC connection over TCP is:
//! a message never overtakes one sent before it on the same direction. A message is dropped
//! with probability `loss_ppm` per million, or when its direction is cut when it is sent or
//! when it arrives. Requests and replies travel separately, so a commit can apply and its reply
//! be lost.

use setpoint_sim::delay::WorldRng;

/// One direction of a host's link.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Dir {
    /// Host → store: requests.
    Up,
    /// Store → host: replies and watch events.
    Down,
}

/// The network's settings, the same for every link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NetConfig {
    /// The fixed part of a message's delay, milliseconds.
    pub delay_ms: u64,
    /// The most added to `delay_ms`, uniformly, milliseconds.
    pub jitter_ms: u64,
    /// The chance a message is lost, in parts per million.
    pub loss_ppm: u64,
    /// What a `slow` fault adds to each message on the host's link, each way, milliseconds.
    pub slow_ms: u64,
}

#[derive(Clone, Debug, Default)]
struct Link {
    /// How many faults cut each direction now (a cut heals when its count is back to 0).
    cuts: [u32; 2],
    /// The latest arrival scheduled on each direction, for FIFO order.
    last: [u64; 2],
    /// How many `slow` faults hold the link now.
    slow: u32,
}

/// The links of every host.
#[derive(Clone, Debug)]
pub struct Net {
    cfg: NetConfig,
    links: Vec<Link>,
}

fn ix(d: Dir) -> usize {
    match d {
        Dir::Up => 0,
        Dir::Down => 1,
    }
}

impl Net {
    /// `hosts` links, all up.
    pub fn new(cfg: NetConfig, hosts: usize) -> Self {
        Self {
            cfg,
            links: vec![Link::default(); hosts],
        }
    }

    /// Whether `dir` of `host`'s link is up.
    pub fn up(&self, host: usize, dir: Dir) -> bool {
        self.links[host].cuts[ix(dir)] == 0
    }

    /// Cuts (`cut = true`) or heals one cut of `dir` of `host`'s link. Cuts nest: two faults
    /// that overlap heal when both have ended.
    pub fn set_cut(&mut self, host: usize, dir: Dir, cut: bool) {
        let c = &mut self.links[host].cuts[ix(dir)];
        *c = if cut { *c + 1 } else { c.saturating_sub(1) };
    }

    /// Slows (`slow = true`) or ends one slowing of `host`'s link: while any holds it, every
    /// message on it, either way, takes `slow_ms` longer. Slowings nest, as cuts do.
    pub fn set_slow(&mut self, host: usize, slow: bool) {
        let s = &mut self.links[host].slow;
        *s = if slow { *s + 1 } else { s.saturating_sub(1) };
    }

    /// Sends a message at `now` on `dir` of `host`'s link: its arrival time, or `None` if it is
    /// lost or the direction is cut.
    pub fn send(&mut self, rng: &mut WorldRng, host: usize, dir: Dir, now: u64) -> Option<u64> {
        if !self.up(host, dir) {
            return None;
        }
        if self.cfg.loss_ppm > 0 && rng.uniform(0, 999_999) < self.cfg.loss_ppm {
            return None;
        }
        let mut delay = self.cfg.delay_ms + rng.uniform(0, self.cfg.jitter_ms);
        if self.links[host].slow > 0 {
            delay += self.cfg.slow_ms;
        }
        let last = &mut self.links[host].last[ix(dir)];
        let at = (now + delay).max(*last);
        *last = at;
        Some(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_direction_is_fifo_under_jitter() {
        let mut rng = WorldRng::new(7);
        let mut net = Net::new(
            NetConfig {
                delay_ms: 1,
                jitter_ms: 50,
                loss_ppm: 0,
                slow_ms: 0,
            },
            1,
        );
        let mut last = 0;
        for t in 0..200 {
            let at = net.send(&mut rng, 0, Dir::Down, t).unwrap();
            assert!(at >= last && at > t);
            last = at;
        }
    }

    #[test]
    fn a_cut_direction_drops_only_its_own_messages_and_cuts_nest() {
        let mut rng = WorldRng::new(1);
        let cfg = NetConfig {
            delay_ms: 5,
            jitter_ms: 0,
            loss_ppm: 0,
            slow_ms: 0,
        };
        let mut net = Net::new(cfg, 2);
        net.set_cut(0, Dir::Up, true);
        net.set_cut(0, Dir::Up, true);
        assert_eq!(net.send(&mut rng, 0, Dir::Up, 0), None);
        assert_eq!(net.send(&mut rng, 0, Dir::Down, 0), Some(5));
        assert_eq!(net.send(&mut rng, 1, Dir::Up, 0), Some(5));
        net.set_cut(0, Dir::Up, false);
        assert!(!net.up(0, Dir::Up), "one cut is still on");
        net.set_cut(0, Dir::Up, false);
        assert_eq!(net.send(&mut rng, 0, Dir::Up, 10), Some(15));
    }

    #[test]
    fn loss_drops_about_its_share() {
        let mut rng = WorldRng::new(3);
        let cfg = NetConfig {
            delay_ms: 0,
            jitter_ms: 0,
            loss_ppm: 100_000,
            slow_ms: 0,
        };
        let mut net = Net::new(cfg, 1);
        let lost = (0..10_000)
            .filter(|&t| net.send(&mut rng, 0, Dir::Up, t).is_none())
            .count();
        assert!((800..1200).contains(&lost), "{lost} of 10000 lost at 10%");
    }

    #[test]
    fn a_slowed_link_adds_its_delay_each_way_keeps_fifo_and_slowings_nest() {
        let cfg = NetConfig {
            delay_ms: 5,
            jitter_ms: 0,
            loss_ppm: 0,
            slow_ms: 700,
        };
        let mut rng = WorldRng::new(3);
        let mut net = Net::new(cfg, 2);
        assert_eq!(net.send(&mut rng, 0, Dir::Up, 10), Some(15));
        net.set_slow(0, true);
        net.set_slow(0, true);
        assert_eq!(net.send(&mut rng, 0, Dir::Up, 20), Some(725));
        assert_eq!(net.send(&mut rng, 0, Dir::Down, 20), Some(725));
        assert_eq!(
            net.send(&mut rng, 1, Dir::Up, 20),
            Some(25),
            "other links as before"
        );
        net.set_slow(0, false);
        assert_eq!(
            net.send(&mut rng, 0, Dir::Up, 30),
            Some(735),
            "still slowed once"
        );
        net.set_slow(0, false);
        // Healed: a message sent now would arrive first, but the direction stays FIFO.
        assert_eq!(net.send(&mut rng, 0, Dir::Up, 40), Some(735));
        assert_eq!(net.send(&mut rng, 0, Dir::Up, 800), Some(805));
    }
}
