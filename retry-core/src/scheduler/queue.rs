//! The pending queue, behind a seam: in memory today, persisted (SQLite, PostgreSQL) later.
//!
//! The scheduler only pushes, pops in order, drains and counts; everything else — limits,
//! policies, events — stays in the scheduler, so a durable queue implements just this.

use std::collections::VecDeque;

/// A bounded first-in, first-out store of tasks waiting for a slot.
pub(crate) trait PendingQueue<J>: Send {
    /// Appends `job`, or hands it back when the queue is full.
    fn push(&mut self, job: J) -> Result<(), J>;
    /// The oldest job, if any.
    fn pop(&mut self) -> Option<J>;
    /// Every job, oldest first, leaving the queue empty.
    fn drain(&mut self) -> Vec<J>;
    /// Jobs waiting.
    fn len(&self) -> usize;
    /// The most jobs it holds.
    fn capacity(&self) -> usize;
}

/// The in-memory queue.
#[derive(Debug)]
pub(crate) struct MemoryQueue<J> {
    jobs: VecDeque<J>,
    capacity: usize,
}

impl<J> MemoryQueue<J> {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            jobs: VecDeque::new(),
            capacity,
        }
    }
}

impl<J: Send> PendingQueue<J> for MemoryQueue<J> {
    fn push(&mut self, job: J) -> Result<(), J> {
        if self.jobs.len() >= self.capacity {
            return Err(job);
        }
        self.jobs.push_back(job);
        Ok(())
    }

    fn pop(&mut self) -> Option<J> {
        self.jobs.pop_front()
    }

    fn drain(&mut self) -> Vec<J> {
        self.jobs.drain(..).collect()
    }

    fn len(&self) -> usize {
        self.jobs.len()
    }

    fn capacity(&self) -> usize {
        self.capacity
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_queue_is_fifo_and_bounded() {
        let mut q = MemoryQueue::new(2);
        assert_eq!(q.push(1), Ok(()));
        assert_eq!(q.push(2), Ok(()));
        assert_eq!(q.push(3), Err(3));
        assert_eq!((q.len(), q.capacity()), (2, 2));
        assert_eq!(q.pop(), Some(1));
        assert_eq!(q.push(4), Ok(()));
        assert_eq!(q.drain(), [2, 4]);
        assert_eq!(q.pop(), None);
    }
}
