import ConcordSystem
import ConcordTestSupport
import Foundation
import Synchronization
import Testing

@testable import FileWatching

#if canImport(Glibc)
import Glibc
#endif

/// I/O failures under the watcher: a wakeup that cannot be written is an error, not a wait
/// forever; a signal interrupting a wait is retried, not reported.
@Suite("Watcher I/O failures")
struct IOFailureTests {
    let directory = TemporaryDirectory("io-failure")

    /// Runs `body` on a thread of its own and waits at most `bound` for it: `nil` if it did not
    /// return by then (a hang, which the test reports instead of hanging too).
    func bounded<T: Sendable>(_ bound: Duration = .seconds(20), _ body: @escaping @Sendable () -> T) -> T? {
        let done = DispatchSemaphore(value: 0)
        let result = Mutex<T?>(nil)
        Thread.detachNewThread {
            let value = body()
            result.withLock { $0 = value }
            done.signal()
        }
        let seconds = Double(bound.components.seconds) + Double(bound.components.attoseconds) / 1e18
        guard done.wait(timeout: .now() + seconds) == .success else { return nil }
        return result.withLock { $0 }
    }

    @Test(
        "Inotify.wake on a descriptor it cannot write throws write/EBADF naming the eventfd; a full counter and an empty drain are fine"
    )
    func wakeFailureThrows() throws {
        #expect {
            try Inotify.wake(-1)
        } throws: { error in
            guard let error = error as? SystemCallError else { return false }
            return error.systemCall == "write" && error.errno == .badFileDescriptor && error.path == "eventfd"
        }
        let fd = try Inotify.openWakeup()
        defer { FileLock.close(fd) }
        try Inotify.drainWakeups(fd)  // nothing pending: EAGAIN is not an error
        try Inotify.wake(fd)
        try Inotify.wake(fd)
        #expect(try Inotify.waitReadable([fd], timeoutMilliseconds: 0) == [true])
        try Inotify.drainWakeups(fd)
        #expect(try Inotify.waitReadable([fd], timeoutMilliseconds: 0) == [false])
        #expect(throws: SystemCallError.self) { try Inotify.drainWakeups(-1) }
    }

    @Test(
        "A watcher whose thread cannot be woken fails the request at once (systemCallFailed, with the cause) and stops, instead of waiting forever"
    )
    func watcherWakeFailure() throws {
        try WatchLimitLock.shared {
            let watcher = try InotifyWatcher()
            defer {
                watcher.failWakeupsForTesting(with: nil)
                watcher.stop()
            }
            let folder = directory.makeDirectory("watched")
            let cause = SystemCallError(systemCall: "write", errno: .badFileDescriptor, path: "eventfd")
            watcher.failWakeupsForTesting(with: cause)
            let outcome = bounded { () -> String in
                do throws(WatchError) {
                    _ = try watcher.watch(folder) { _ in }
                    return "watching"
                } catch {
                    return "\(error.code.rawValue)|\(error.underlyingError.map { "\($0)" } ?? "")"
                }
            }
            let reported = try #require(
                outcome,
                "watch(_:) did not return within 20 s: it waits for a thread nobody woke"
            )
            #expect(
                reported.hasPrefix("systemCallFailed|") && reported.contains("\(cause)"),
                "watch(_:) ended with \(reported)"
            )

            // The watcher stopped: later requests say so at once.
            let later = bounded { () -> String in
                do throws(WatchError) {
                    _ = try watcher.watch(folder) { _ in }
                    return "watching"
                } catch {
                    return error.code.rawValue
                }
            }
            #expect(later == "stopped", "a later watch(_:) ended with \(later ?? "nothing within 20 s")")
        }
    }

    @Test("A poll interrupted by signals (EINTR) is retried until the wakeup arrives")
    func pollRetriesInterrupts() throws {
        var action = sigaction()
        action.__sigaction_handler.sa_handler = { _ in }
        action.sa_flags = 0  // no SA_RESTART: the poll returns EINTR
        var previous = sigaction()
        sigaction(SIGUSR1, &action, &previous)
        defer { sigaction(SIGUSR1, &previous, nil) }

        let fd = try Inotify.openWakeup()
        defer { FileLock.close(fd) }
        let started = DispatchSemaphore(value: 0)
        let thread = Mutex<pthread_t?>(nil)
        let outcome = Mutex<String?>(nil)
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            var unblock = sigset_t()
            sigemptyset(&unblock)
            sigaddset(&unblock, SIGUSR1)
            pthread_sigmask(SIG_UNBLOCK, &unblock, nil)
            thread.withLock { $0 = pthread_self() }
            started.signal()
            do {
                let readable = try Inotify.waitReadable([fd], timeoutMilliseconds: 20_000)
                outcome.withLock { $0 = "\(readable)" }
            } catch {
                outcome.withLock { $0 = "\(error)" }
            }
            done.signal()
        }
        started.wait()
        let target = try #require(thread.withLock { $0 })
        for _ in 0..<20 {
            pthread_kill(target, SIGUSR1)
            usleep(1_000)  // spacing the interruptions; nothing waits on this
        }
        try Inotify.wake(fd)
        #expect(done.wait(timeout: .now() + 20) == .success, "the poll did not return after the wakeup")
        #expect(outcome.withLock { $0 } == "[true]", "the poll ended with \(outcome.withLock { $0 } ?? "nothing")")
    }
}
