import FolderSync
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Shows the progress of long joins (existing data exported when a store first syncs) and
/// imports on standard error: a bar redrawn in place on a terminal, or a line at every tenth
/// when standard error is a file or a pipe. Joins of fewer than ``recordThreshold`` records and
/// imports of fewer than ``logThreshold`` logs show nothing.
final class ProgressReporter: Sendable {
    private static let override = ProcessInfo.processInfo.environment["NOTES_PROGRESS_THRESHOLD"].flatMap(Int.init)
    /// The smallest join that shows progress, in records; `$NOTES_PROGRESS_THRESHOLD` overrides it.
    static let recordThreshold = override ?? 2000
    /// The smallest import that shows progress, in logs (sync counts an import's progress in
    /// logs: one per save, or up to a thousand records of another device's join);
    /// `$NOTES_PROGRESS_THRESHOLD` overrides it.
    static let logThreshold = override ?? 20

    private let observer: NSObjectProtocolBox
    private let meter: Locked<ProgressMeter>

    /// Starts listening to `sync`'s events.
    init(sync: FolderSync) {
        let meter = Locked(ProgressMeter(isTerminal: isatty(STDERR_FILENO) == 1))
        self.meter = meter
        observer = NSObjectProtocolBox(
            NotificationCenter.default.addObserver(forName: .concordSyncEvent, object: sync, queue: nil) { note in
                guard let event = note.userInfo?["event"] as? SyncEvent else { return }
                let output: String?
                switch event {
                case .joinProgress(let examined, let total):
                    output = meter.withLock {
                        $0.update(
                            task: "joining",
                            unit: "records",
                            done: examined,
                            of: total,
                            threshold: Self.recordThreshold
                        )
                    }
                case .importProgress(let applied, let total):
                    output = meter.withLock {
                        $0.update(
                            task: "importing",
                            unit: "logs",
                            done: applied,
                            of: total,
                            threshold: Self.logThreshold
                        )
                    }
                default:
                    output = nil
                }
                if let output { try? FileHandle.standardError.write(contentsOf: Data(output.utf8)) }
            }
        )
    }

    /// Stops listening; ends a bar that was left unfinished with a newline.
    func finish() {
        NotificationCenter.default.removeObserver(observer.value)
        if let output = meter.withLock({ $0.finish() }) {
            try? FileHandle.standardError.write(contentsOf: Data(output.utf8))
        }
    }
}

/// What to print for each progress step (a pure state machine: no I/O).
struct ProgressMeter: Sendable {
    let isTerminal: Bool
    /// The task shown last, its last tenth (lines) or percent (bar), and whether a bar is open.
    private var task: String?
    private var shown = -1
    private var barOpen = false

    init(isTerminal: Bool) {
        self.isTerminal = isTerminal
    }

    /// The text to write for `done` of `total`, or `nil` when nothing changes or `total` is
    /// below `threshold`.
    mutating func update(task: String, unit: String, done: Int, of total: Int, threshold: Int) -> String? {
        guard total >= threshold, total > 0 else { return nil }
        var prefix = ""
        if task != self.task {
            prefix = finish() ?? ""
            self.task = task
            shown = -1
        }
        let percent = min(100, done * 100 / total)
        if isTerminal {
            guard percent != shown else { return prefix.isEmpty ? nil : prefix }
            shown = percent
            barOpen = percent < 100
            let width = 30
            let filled = percent * width / 100
            let bar = String(repeating: "#", count: filled) + String(repeating: " ", count: width - filled)
            return prefix + "\r[\(bar)] \(String(format: "%3d", percent))% \(task) \(done)/\(total) \(unit)"
                + (percent == 100 ? "\n" : "")
        }
        let tenth = percent / 10
        guard tenth != shown else { return prefix.isEmpty ? nil : prefix }
        shown = tenth
        return prefix + "\(task): \(tenth * 10)% (\(done)/\(total) \(unit))\n"
    }

    /// A newline if a bar is still open.
    mutating func finish() -> String? {
        defer { barOpen = false }
        return barOpen ? "\n" : nil
    }
}
