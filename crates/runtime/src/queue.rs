//! The work queue behind [`Controller`](crate::Controller): keys served in the order they were
//! first asked for, each at most once at a time, none lost.
//!
//! The same contract as client-go's `workqueue` (what kube-controller-manager's controllers
//! run on): a key asked for while it waits is not queued twice; a key asked for while its
//! reconcile runs is marked dirty and queued again (at the back) when that reconcile ends, so
//! the change that arrived mid-reconcile is seen; a key whose reconcile asked to look again
//! later waits in a timer, and an earlier request for it wins.
//!
//! kube-runtime's scheduler has the same "once at a time, never lost" contract but parks the
//! keys that wait for a free worker in a hash set and takes them out in hash order: in a burst
//! larger than the workers, some keys wait for most of the burst (`cargo xtask bench storm`,
//! 10,000 CSRs 1,000 at a time: a p99 close to the whole storm). Here they leave in arrival
//! order.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::Hash;

/// Keys waiting for a worker (first in, first out) and keys being worked on.
#[derive(Debug)]
pub(crate) struct WorkQueue<T> {
    fifo: VecDeque<T>,
    queued: HashSet<T>,
    /// Keys being worked on, and whether each was asked for again meanwhile (dirty).
    running: HashMap<T, bool>,
}

impl<T> Default for WorkQueue<T> {
    fn default() -> Self {
        Self {
            fifo: VecDeque::new(),
            queued: HashSet::new(),
            running: HashMap::new(),
        }
    }
}

impl<T: Hash + Eq + Clone> WorkQueue<T> {
    /// Asks for `key` to be worked on: queued at the back unless it already waits; marked dirty
    /// (worked on again once done) if it is being worked on now.
    pub(crate) fn add(&mut self, key: T) {
        if let Some(dirty) = self.running.get_mut(&key) {
            *dirty = true;
        } else if self.queued.insert(key.clone()) {
            self.fifo.push_back(key);
        }
    }

    /// The key that waited longest, now counted as being worked on.
    pub(crate) fn pop(&mut self) -> Option<T> {
        let key = self.fifo.pop_front()?;
        self.queued.remove(&key);
        self.running.insert(key.clone(), false);
        Some(key)
    }

    /// Ends the work on `key`. Returns true when it was asked for meanwhile: it is queued again
    /// (at the back), and whatever the finished run asked for (a later look) is moot.
    pub(crate) fn done(&mut self, key: &T) -> bool {
        match self.running.remove(key) {
            Some(true) => {
                self.add(key.clone());
                true
            }
            _ => false,
        }
    }

    /// Whether `key` waits for a worker or is being worked on.
    #[cfg(test)]
    pub(crate) fn contains(&self, key: &T) -> bool {
        self.queued.contains(key) || self.running.contains_key(key)
    }

    /// Keys waiting for a worker.
    pub(crate) fn waiting(&self) -> usize {
        self.fifo.len()
    }

    /// Keys being worked on.
    pub(crate) fn running(&self) -> usize {
        self.running.len()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use proptest::prelude::*;

    #[test]
    fn serves_in_arrival_order_once_each() {
        let mut q = WorkQueue::default();
        for k in [3, 1, 2, 1, 3] {
            q.add(k);
        }
        assert_eq!(q.waiting(), 3);
        assert_eq!(
            std::iter::from_fn(|| q.pop()).collect::<Vec<_>>(),
            [3, 1, 2]
        );
        assert_eq!(q.running(), 3);
    }

    #[test]
    fn a_key_asked_for_while_running_runs_again_after() {
        let mut q = WorkQueue::default();
        q.add("a");
        q.add("b");
        assert_eq!(q.pop(), Some("a"));
        q.add("a"); // changed mid-reconcile: not a second concurrent run
        assert_eq!(q.pop(), Some("b"));
        assert_eq!(q.pop(), None);
        assert!(q.done(&"a"));
        assert_eq!(q.pop(), Some("a"));
        assert!(!q.done(&"a"));
        assert!(!q.done(&"b"));
        assert!(!q.contains(&"a") && !q.contains(&"b"));
    }

    #[derive(Debug, Clone)]
    enum Op {
        Add(u8),
        Pop,
        Done(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u8..8).prop_map(Op::Add),
            Just(Op::Pop),
            (0usize..8).prop_map(Op::Done),
        ]
    }

    proptest! {
        /// Against a model: never two runs of a key at once, never a key queued twice, no
        /// request lost (every key asked for after its last run started is run again), and
        /// keys leave in the order they were first queued.
        #[test]
        fn never_twice_at_once_never_lost_in_order(ops in proptest::collection::vec(op(), 0..200)) {
            let mut q = WorkQueue::default();
            let mut running: Vec<u8> = Vec::new();
            // Keys with a request not yet served by a run that started after it.
            let mut owed: HashSet<u8> = HashSet::new();
            let mut order: Vec<u8> = Vec::new();
            for op in ops {
                match op {
                    Op::Add(k) => {
                        q.add(k);
                        owed.insert(k);
                        if !running.contains(&k) && !order.contains(&k) {
                            order.push(k);
                        }
                    }
                    Op::Pop => {
                        let got = q.pop();
                        prop_assert_eq!(got, order.first().copied());
                        if let Some(k) = got {
                            order.remove(0);
                            prop_assert!(!running.contains(&k), "{} run twice at once", k);
                            running.push(k);
                            owed.remove(&k);
                        }
                    }
                    Op::Done(i) if !running.is_empty() => {
                        let k = running.remove(i % running.len());
                        let again = q.done(&k);
                        prop_assert_eq!(again, owed.contains(&k));
                        if again {
                            order.push(k);
                        }
                    }
                    Op::Done(_) => {}
                }
                prop_assert_eq!(q.waiting(), order.len());
                prop_assert_eq!(q.running(), running.len());
            }
            // Drain: every owed key is served.
            while let Some(k) = q.pop() {
                owed.remove(&k);
                prop_assert!(!q.done(&k));
            }
            for k in running {
                if q.done(&k) {
                    owed.remove(&q.pop().unwrap());
                }
            }
            prop_assert!(owed.is_empty(), "lost: {:?}", owed);
        }
    }
}
