import ConcordSystem
import Foundation

/// A lock wait that a deadline or a cancellation can end.
///
/// Neither `flock` nor `F_OFD_SETLKW` has a timeout. The lock is first tried without blocking; if
/// another process holds it, a helper thread makes the blocking call while the caller waits with
/// its deadline. If the caller gives up first, the descriptor belongs to the helper from then on:
/// it closes it as soon as its call returns, which drops whatever lock it got. Either way, once
/// the outcome is `.abandoned` the caller must forget the descriptor (it is, or will be, closed).
///
/// A helper blocked on a peer that never lets go stays blocked until the peer exits; each
/// abandoned wait costs one such thread until then.
enum LockWait {
    enum Outcome: Equatable {
        /// The lock is held.
        case acquired
        /// The deadline passed or the coordination was cancelled; the descriptor is gone.
        case abandoned(WaitOutcome)
    }

    static func acquire(
        _ fd: Int32,
        deadline: Deadline?,
        token: CoordinationToken,
        attempt: () throws(SystemCallError) -> Bool,
        block: @escaping @Sendable () throws(SystemCallError) -> Void
    ) throws(SystemCallError) -> Outcome {
        if try attempt() { return .acquired }
        if token.isCancelled {
            FileLock.close(fd)
            return .abandoned(.cancelled)
        }
        if let deadline, deadline.hasPassed {
            FileLock.close(fd)
            return .abandoned(.timedOut)
        }
        let result = OneShot<Result<Void, SystemCallError>>()
        Thread.detachNewThread {
            let outcome = Result { () throws(SystemCallError) in try block() }
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
