import ArgumentParser
import Dispatch
import FolderSync
import Foundation
import Persistence

#if canImport(Glibc)
import Glibc
#endif

/// `notes watch`: syncs live and prints every change that arrives from other devices, until
/// SIGINT or SIGTERM. Says `ready` once it is watching (and `stopped` at the end: the two lines
/// scripts wait for, on standard output with the records; sync's status lines go to standard
/// error). If the container is reset (deleted, or
/// this device's registration removed), it says that sync stopped and lists the local notes,
/// which are still there.
struct Watch: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Sync live and print every change that arrives from other devices, until interrupted."
    )

    @OptionGroup var options: GlobalOptions

    func validate() throws {
        guard !options.offline else { throw ValidationError("`watch` cannot be --offline") }
    }

    func run() throws {
        // Signals become events on a queue (installed first: a test may signal as soon as it sees `ready`).
        signal(SIGINT, SIG_IGN)
        signal(SIGTERM, SIG_IGN)
        let stop = DispatchSemaphore(value: 0)
        let sources = [SIGINT, SIGTERM].map { number in
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { stop.signal() }
            source.resume()
            return source
        }
        defer { for source in sources { source.cancel() } }

        let library = try NotesLibrary(options: options)
        defer { library.close() }
        guard let sync = library.sync else { throw NotesError("no container to watch: give one with --container") }

        // Everything is printed from one serial queue, in the order sync reported it. A line
        // that cannot be written ends the watch (with that error, exit status 1).
        let output = DispatchQueue(label: "notes.watch")
        let outputFailure = Locked<NotesError?>(nil)
        let emit: @Sendable (String) -> Void = { line in
            do throws(NotesError) {
                try say(line)
            } catch {
                let first = outputFailure.withLock { failure -> Bool in
                    guard failure == nil else { return false }
                    failure = error
                    return true
                }
                if first { stop.signal() }
            }
        }
        let report: @Sendable () -> Void = {
            output.async {
                do {
                    for line in try library.settle() { emit(line) }
                } catch {
                    complain("sync warning: \(error)")
                }
            }
        }
        library.onArrival(report)
        let observer = NSObjectProtocolBox(
            NotificationCenter.default.addObserver(forName: .concordSyncEvent, object: sync, queue: nil) { note in
                guard let event = note.userInfo?["event"] as? SyncEvent else { return }
                switch event {
                case .imported, .exported, .corruptLog, .corruptSentinel, .failed, .newerSchemaFound:
                    if let line = EventLog.line(for: event) { output.async { complain(line) } }
                case .containerUnavailable(let availability):
                    output.async { complain("sync waiting: the container is \(availability)") }
                case .exportDeferred:
                    // A save (a repair made while settling) is committed; its log waits in the outbox.
                    output.async { complain("sync warning: \(event)") }
                default: break
                }
            }
        )
        defer { NotificationCenter.default.removeObserver(observer.value) }
        let delegate = ResetReporter(library: library, output: output, emit: emit)
        sync.delegate = delegate

        for line in try library.startSync(offline: false) {
            output.sync {
                switch line {
                case .data(let text): emit(text)
                case .status(let text): complain(text)
                }
            }
        }
        // Waiting for a missing container is watching too: sync starts when it comes back.
        guard sync.state != .off else { throw NotesError("sync could not start through \(sync.layout.container.path)") }
        output.sync {
            complain("watching \(sync.layout.container.path) as \(sync.deviceID) (\(sync.state))")
            emit("ready")
        }
        stop.wait()
        sync.waitForQueuedWork()
        output.sync { if outputFailure.withLock({ $0 }) == nil { emit("stopped") } }
        withExtendedLifetime(delegate) {}
        if let failure = outputFailure.withLock({ $0 }) { throw failure }
    }
}

/// Told by sync when a container reset stopped it: says so, and lists the local notes.
final class ResetReporter: FolderSyncDelegate {
    let library: NotesLibrary
    let output: DispatchQueue
    let say: @Sendable (String) -> Void

    init(library: NotesLibrary, output: DispatchQueue, emit: @escaping @Sendable (String) -> Void) {
        self.library = library
        self.output = output
        say = emit
    }

    func folderSync(_ sync: FolderSync, didStopAfterReset reason: ContainerResetReason) {
        output.async { [library, say] in
            // Deleting a container removes the files in it before the folder itself, so sync may
            // notice the registration gone first: say what is there to see now.
            let gone = reason == .registrationRemoved && ContainerAvailability.of(sync.layout.container) == .missing
            say("sync stopped: \(reason)\(gone ? " (and the container is gone)" : ""); the local data is kept")
            do {
                let context = library.context("notes after reset")
                let notes = try library.notes(in: context)
                say("local notes: \(notes.count)")
                let describe = library.describer(in: context)
                for note in notes { say(try describe(note)) }
            } catch {
                complain("sync warning: cannot list the local notes: \(error)")
            }
        }
    }
}
