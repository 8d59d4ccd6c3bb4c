//! The bounded queue of jobs waiting for a worker. Full means RESOURCE_EXHAUSTED at the
//! boundary, with a retry delay from the queue length and recent throughput; a cancelled job
//! leaves the queue at once; closing it (shutdown) hands the waiting jobs back.
//!
//! Its capacity bounds every job waiting on this instance, not only renders: a job that
//! follows an identical render (of this instance or another) holds a [`FollowerSlot`] until
//! it ends. Otherwise identical submissions under new idempotency keys would be accepted
//! without bound, each a job record, a watcher's worth of updates and a shared record. What
//! counts: queued renders + followers that have not ended. What does not: renders running
//! on a worker (bounded by `--workers`) and jobs reusing a finished output (they end at once).

use super::quarantine::lock;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;
use uuid::Uuid;

#[derive(Debug)]
pub struct RenderQueue {
    capacity: usize,
    state: Mutex<QueueState>,
    available: Notify,
}

#[derive(Debug, Default)]
struct QueueState {
    jobs: VecDeque<Uuid>,
    /// Jobs following a render that holds their slot ([`FollowerSlot`]).
    followers: usize,
    closed: bool,
}

impl QueueState {
    fn waiting(&self) -> usize {
        self.jobs.len() + self.followers
    }
}

/// A follower's place in the queue's capacity, given back when dropped.
#[derive(Debug)]
pub struct FollowerSlot {
    queue: Arc<RenderQueue>,
}

impl FollowerSlot {
    /// A slot for a job that follows a render, unless the queue is full or closed.
    pub fn take(queue: &Arc<RenderQueue>) -> Result<FollowerSlot, PushRefused> {
        let mut state = lock(&queue.state);
        if state.closed {
            return Err(PushRefused::Closed);
        }
        if state.waiting() >= queue.capacity {
            return Err(PushRefused::Full {
                length: state.waiting(),
            });
        }
        state.followers += 1;
        Ok(FollowerSlot {
            queue: queue.clone(),
        })
    }
}

impl Drop for FollowerSlot {
    fn drop(&mut self) {
        let mut state = lock(&self.queue.state);
        state.followers = state.followers.saturating_sub(1);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushRefused {
    /// The queue holds `capacity` jobs already.
    Full { length: usize },
    /// The server is shutting down.
    Closed,
}

impl RenderQueue {
    pub fn new(capacity: usize) -> RenderQueue {
        RenderQueue {
            capacity,
            state: Mutex::new(QueueState::default()),
            available: Notify::new(),
        }
    }

    pub fn try_push(&self, job: Uuid) -> Result<usize, PushRefused> {
        let mut state = lock(&self.state);
        if state.closed {
            return Err(PushRefused::Closed);
        }
        if state.waiting() >= self.capacity {
            return Err(PushRefused::Full {
                length: state.waiting(),
            });
        }
        state.jobs.push_back(job);
        let length = state.jobs.len();
        drop(state);
        self.available.notify_one();
        Ok(length)
    }

    /// The next job, waiting for one; `None` once the queue is closed.
    pub async fn pop(&self) -> Option<Uuid> {
        loop {
            // Registered before looking, so a push between the look and the wait is not lost.
            let notified = self.available.notified();
            {
                let mut state = lock(&self.state);
                if state.closed {
                    return None;
                }
                if let Some(job) = state.jobs.pop_front() {
                    return Some(job);
                }
            }
            notified.await;
        }
    }

    /// Takes a waiting job out (cancel); false when it was not waiting.
    pub fn remove(&self, job: Uuid) -> bool {
        let mut state = lock(&self.state);
        let before = state.jobs.len();
        state.jobs.retain(|queued| *queued != job);
        state.jobs.len() != before
    }

    pub fn len(&self) -> usize {
        lock(&self.state).jobs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Jobs following a render, holding a slot.
    pub fn followers(&self) -> usize {
        lock(&self.state).followers
    }

    /// Whether a new job would be refused for want of room (readiness reads it).
    pub fn is_full(&self) -> bool {
        lock(&self.state).waiting() >= self.capacity
    }

    /// Refuses new jobs, wakes every waiting worker loop and answers the jobs left waiting.
    pub fn close(&self) -> Vec<Uuid> {
        let mut state = lock(&self.state);
        state.closed = true;
        let left = state.jobs.drain(..).collect();
        drop(state);
        self.available.notify_waiters();
        left
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_full_queue_refuses_and_a_closed_one_hands_back_what_waits() {
        let queue = RenderQueue::new(2);
        let (a, b, c) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
        assert_eq!(queue.try_push(a), Ok(1));
        assert_eq!(queue.try_push(b), Ok(2));
        assert_eq!(queue.try_push(c), Err(PushRefused::Full { length: 2 }));
        assert!(queue.is_full());
        assert_eq!(queue.pop().await, Some(a));
        assert!(!queue.is_full());
        assert!(queue.remove(b));
        assert!(!queue.remove(b));
        assert_eq!(queue.try_push(c), Ok(1));
        assert_eq!(queue.close(), vec![c]);
        assert_eq!(queue.pop().await, None);
        assert_eq!(queue.try_push(a), Err(PushRefused::Closed));
    }

    #[test]
    fn followers_take_the_capacity_renders_would_and_give_it_back_when_they_end() {
        let queue = std::sync::Arc::new(RenderQueue::new(2));
        let follower = FollowerSlot::take(&queue).unwrap();
        assert_eq!(queue.try_push(Uuid::new_v4()), Ok(1));
        assert_eq!(
            FollowerSlot::take(&queue).unwrap_err(),
            PushRefused::Full { length: 2 }
        );
        assert_eq!(
            queue.try_push(Uuid::new_v4()),
            Err(PushRefused::Full { length: 2 })
        );
        drop(follower);
        assert_eq!(queue.followers(), 0);
        let _again = FollowerSlot::take(&queue).unwrap();
    }

    #[tokio::test]
    async fn a_waiting_pop_wakes_on_push_and_on_close() {
        let queue = std::sync::Arc::new(RenderQueue::new(4));
        let waiter = tokio::spawn({
            let queue = queue.clone();
            async move { (queue.pop().await, queue.pop().await) }
        });
        tokio::task::yield_now().await;
        let job = Uuid::new_v4();
        queue.try_push(job).unwrap();
        tokio::task::yield_now().await;
        queue.close();
        assert_eq!(waiter.await.unwrap(), (Some(job), None));
    }
}
