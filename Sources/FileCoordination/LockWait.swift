#if canImport(Glibc)
import Glibc
#endif
import ConcordSystem
import Foundation

/// A `flock(2)` wait that a deadline or a cancellation can end.
///
/// `flock` has no timeout. The lock is first tried without blocking; if another process holds it,
/// a helper thread makes the blocking call while the caller waits with its deadline. If the caller
/// gives up first, the descriptor belongs to the helper from then on: it closes it as soon as its
/// `flock` returns, which drops whatever lock it got, and the caller must forget the descriptor.
enum LockWait {
    enum Outcome: Equatable {
        /// The lock is held.
        case acquired
        /// The deadline passed or the coordination was cancelled; the descriptor was handed to a
        /// helper thread and must not be used again.
        case abandoned(WaitOutcome)
    }

    static func lock(
        _ fd: Int32, _ mode: FileLockMode, path: String, deadline: Deadline?, token: CoordinationToken
    ) throws(SystemCallError) -> Outcome {
        if try FileLock.tryLock(fd, mode, path: path) { return .acquired }
        if token.isCancelled { return .abandoned(.cancelled) }
        if let deadline, deadline.hasPassed { return .abandoned(.timedOut) }

        let result = OneShot<Result<Void, SystemCallError>>()
        Thread.detachNewThread {
            let outcome = Result { () throws(SystemCallError) in try FileLock.lock(fd, mode, path: path) }
            if !result.fulfil(outcome) {
                // The waiter gave up: this descriptor is ours to close, which releases the lock.
                FileLock.close(fd)
            }
        }
        let (how, value) = result.wait(until: deadline, token: token)
        switch (how, value) {
        case (.completed, .success?): return .acquired
        case (.completed, .failure(let error)?): throw error
        default: return .abandoned(how)
        }
    }
}
