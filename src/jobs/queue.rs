//! The bounded queue of jobs waiting for a worker. Full means RESOURCE_EXHAUSTED at the
//! boundary, with a retry delay from the queue length and recent throughput; a cancelled job
//! leaves the queue at once; closing it (shutdown) hands the waiting jobs back.

use super::quarantine::lock;
use std::collections::VecDeque;
use std::sync::Mutex;
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
    closed: bool,
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
        if state.jobs.len() >= self.capacity {
            return Err(PushRefused::Full {
                length: state.jobs.len(),
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
        assert_eq!(queue.pop().await, Some(a));
        assert!(queue.remove(b));
        assert!(!queue.remove(b));
        assert_eq!(queue.try_push(c), Ok(1));
        assert_eq!(queue.close(), vec![c]);
        assert_eq!(queue.pop().await, None);
        assert_eq!(queue.try_push(a), Err(PushRefused::Closed));
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
