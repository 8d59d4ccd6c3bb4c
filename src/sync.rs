//! Locking that a panic elsewhere cannot wedge.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `mutex` even if a holder panicked: every critical section in this crate is a few
/// assignments or one map operation, which leave the data consistent whatever panicked
/// around them, so a poisoned lock is used as it is and one panic never stops the service.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
