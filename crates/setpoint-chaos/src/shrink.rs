//! Shrinking a failing fault schedule to a minimal one that still fails the same check.
//!
//! First ddmin (Zeller and Hildebrandt's delta debugging) over the schedule's faults: drop
//! chunks, then complements, halving the chunk size, until no single fault can be dropped. Then
//! each lasting fault is shortened by halving its duration while the run still fails. The seed
//! stays the same throughout: the world's generator is seeded by it alone, so a run of a
//! shrunk schedule is exactly reproducible from the replay file.

use crate::check::Check;
use crate::faults::Fault;

/// The most runs one shrink may spend.
pub const MAX_TRIES: usize = 400;

/// A schedule cut down from `schedule` for which `fails` still holds (it must hold for
/// `schedule` itself), and the number of runs spent.
pub fn shrink(schedule: &[Fault], fails: &mut dyn FnMut(&[Fault]) -> bool) -> (Vec<Fault>, usize) {
    let mut tries = 0;
    let mut test = |s: &[Fault], tries: &mut usize| {
        *tries += 1;
        fails(s)
    };
    let mut cur = schedule.to_vec();
    // ddmin
    let mut n = 2usize;
    while cur.len() >= 2 && tries < MAX_TRIES {
        let chunk = cur.len().div_ceil(n);
        let mut next_n = None;
        for i in 0..n {
            let lo = (i * chunk).min(cur.len());
            let hi = ((i + 1) * chunk).min(cur.len());
            if lo == hi {
                continue;
            }
            let part: Vec<Fault> = cur[lo..hi].to_vec();
            if part.len() < cur.len() && test(&part, &mut tries) {
                cur = part;
                next_n = Some(2);
                break;
            }
            let rest: Vec<Fault> = cur[..lo].iter().chain(&cur[hi..]).cloned().collect();
            if test(&rest, &mut tries) {
                cur = rest;
                next_n = Some((n - 1).max(2));
                break;
            }
        }
        if let Some(m) = next_n {
            n = m;
        } else {
            if n >= cur.len() {
                break;
            }
            n = (2 * n).min(cur.len());
        }
    }
    if cur.len() == 1 && tries < MAX_TRIES && test(&[], &mut tries) {
        cur.clear();
    }
    // Shorten lasting faults.
    for i in 0..cur.len() {
        while cur[i].duration_ms > 1 && tries < MAX_TRIES {
            let mut t = cur.clone();
            t[i].duration_ms /= 2;
            if test(&t, &mut tries) {
                cur = t;
            } else {
                break;
            }
        }
    }
    (cur, tries)
}

/// The check a failing run broke first, which a shrunk schedule must still break.
pub fn first_check(violations: &[crate::check::Violation]) -> Option<Check> {
    violations.first().map(|v| v.check)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::FaultKind;

    fn f(at: u64, d: u64) -> Fault {
        Fault {
            at_ms: at,
            kind: FaultKind::Pause,
            host: 0,
            duration_ms: d,
        }
    }

    #[test]
    fn ddmin_finds_the_two_faults_that_together_fail() {
        let sched: Vec<Fault> = (0..20).map(|i| f(i * 100, 1000)).collect();
        // Fails when both the faults at 300 and 1700 are present: an oracle of pairs.
        let mut fails =
            |s: &[Fault]| s.iter().any(|x| x.at_ms == 300) && s.iter().any(|x| x.at_ms == 1700);
        let (min, tries) = shrink(&sched, &mut fails);
        assert_eq!(min.iter().map(|x| x.at_ms).collect::<Vec<_>>(), [300, 1700]);
        assert!(
            min.iter().all(|x| x.duration_ms == 1),
            "durations shrink when they do not matter"
        );
        assert!(tries < MAX_TRIES);
    }

    #[test]
    fn shortening_stops_at_the_length_that_still_fails() {
        let sched = vec![f(0, 10_000), f(50, 800)];
        let mut fails = |s: &[Fault]| s.iter().any(|x| x.at_ms == 0 && x.duration_ms >= 3000);
        let (min, _) = shrink(&sched, &mut fails);
        assert_eq!(min, vec![f(0, 5000)], "5000 fails, 2500 does not");
    }

    #[test]
    fn a_failure_without_faults_shrinks_to_the_empty_schedule() {
        let sched = vec![f(0, 10), f(5, 10), f(9, 10)];
        let (min, _) = shrink(&sched, &mut |_| true);
        assert!(min.is_empty());
    }
}
