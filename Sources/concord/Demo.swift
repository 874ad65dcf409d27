import ArgumentParser
import FileCoordination
import Foundation
import Synchronization

/// `concord demo`: two processes coordinating on one file, and a presenter being asked and told.
struct Demo: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show two processes coordinating on one file, and a presenter being asked and told."
    )

    @Option(help: "Where to put the demo's files (default: a new temporary directory).")
    var directory: String?

    @Option(help: .hidden) var childRole: String?
    @Option(help: .hidden) var file: String?

    func run() throws {
        if let childRole, let file {
            try Child.run(role: childRole, file: URL(fileURLWithPath: file))
            return
        }
        let process = ProcessInfo.processInfo.processIdentifier
        let folder =
            directory.map { URL(fileURLWithPath: $0) }
            ?? URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("concord-demo-\(process)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let notes = folder.appendingPathComponent("notes.txt")
        let counter = folder.appendingPathComponent("counter.txt")
        let coordinator = FileCoordinator()
        try coordinator.replaceContentsOfItem(at: notes, with: Data("first line\n".utf8))
        try coordinator.replaceContentsOfItem(at: counter, with: Data("0".utf8))
        say("Concord demo in \(folder.path) (process \(process))")

        // 1. Exclusion across processes.
        say("\n1. A write in this process makes a writer in another process wait")
        let appender = try coordinator.coordinate(writingItemAt: notes) { url in
            say("   parent: holding the write lock on notes.txt")
            let child = try ChildProcess(role: "append", file: notes)
            child.waitFor("asking")
            say("   child:  asked to write notes.txt; it waits")
            Thread.sleep(forTimeInterval: 0.8)
            try (String(contentsOf: url, encoding: .utf8) + "parent was here\n").write(
                to: url,
                atomically: false,
                encoding: .utf8
            )
            say("   parent: done writing, releasing")
            return child
        }
        appender.relay(prefix: "   child:  ")
        ChildProcess.waitForAll()
        say(
            "   notes.txt now reads: "
                + (try String(contentsOf: notes, encoding: .utf8)).split(separator: "\n").joined(separator: " | ")
        )

        // 2. Read-modify-write races, settled.
        say("\n2. Two processes each add 1 to counter.txt 200 times, at the same time")
        let child = try ChildProcess(role: "count", file: counter)
        for _ in 0..<200 {
            try coordinator.updateContentsOfItem(at: counter) {
                Data(String((Int(String(decoding: $0 ?? Data(), as: UTF8.self)) ?? 0) + 1).utf8)
            }
        }
        child.relay(prefix: "   child:  ")
        ChildProcess.waitForAll()
        let total = String(decoding: try coordinator.contentsOfItem(at: counter), as: UTF8.self)
        say("   counter.txt = \(total) (expected 400: no update lost)")

        // 3. Presenters.
        say("\n3. A presenter of notes.txt is asked before, and told after, each coordinated access")
        let presenter = PrintingPresenter(url: notes)
        FileCoordinator.addFilePresenter(presenter)
        defer { FileCoordinator.removeFilePresenter(presenter) }
        let editor = FileCoordinator()
        say("   editor: reading notes.txt")
        _ = try editor.contentsOfItem(at: notes)
        presenter.drain()
        say("   editor: appending to notes.txt")
        try editor.updateContentsOfItem(at: notes) { ($0 ?? Data()) + Data("editor was here\n".utf8) }
        presenter.drain()
        let moved = folder.appendingPathComponent("notes-renamed.txt")
        say("   editor: renaming notes.txt")
        try editor.moveItem(at: notes, to: moved)
        presenter.drain()
        say("   editor: deleting it")
        try editor.removeItem(at: moved)
        presenter.drain()

        // 4. Presenters hear other processes too.
        say("\n4. Another process writes shared.txt; this process's presenter is told (through inotify)")
        let shared = folder.appendingPathComponent("shared.txt")
        try coordinator.replaceContentsOfItem(at: shared, with: Data("hello\n".utf8))
        let watcher = PrintingPresenter(url: shared)
        FileCoordinator.addFilePresenter(watcher)
        defer { FileCoordinator.removeFilePresenter(watcher) }
        let writer = try ChildProcess(role: "append", file: shared)
        writer.relay(prefix: "   child:  ")
        ChildProcess.waitForAll()
        watcher.drain()

        if directory == nil { try? FileManager.default.removeItem(at: folder) }
        say("\nDone.")
    }
}

func say(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

/// A presenter that prints what it is told.
final class PrintingPresenter: FilePresenter, @unchecked Sendable {
    private let state: Mutex<URL>
    private let pending = Mutex<[String]>([])
    private let arrived = DispatchSemaphore(value: 0)

    init(url: URL) { state = Mutex(url) }

    var presentedItemURL: URL? { state.withLock { $0 } }

    private func tell(_ message: String) {
        pending.withLock { $0.append(message) }
        say("   presenter: \(message)")
        arrived.signal()
    }

    /// Waits for the messages that follow an access to arrive (they are asynchronous).
    func drain() {
        while arrived.wait(timeout: .now() + .milliseconds(200)) == .success {}
    }

    func savePresentedItemChanges() throws { tell("savePresentedItemChanges") }
    func relinquishPresentedItem(toReader reader: @escaping @Sendable ((@Sendable () -> Void)?) -> Void) {
        tell("relinquishPresentedItem(toReader:)")
        reader { self.tell("reacquired after the reader") }
    }
    func relinquishPresentedItem(toWriter writer: @escaping @Sendable ((@Sendable () -> Void)?) -> Void) {
        tell("relinquishPresentedItem(toWriter:)")
        writer { self.tell("reacquired after the writer") }
    }
    func presentedItemDidChange() { tell("presentedItemDidChange") }
    func presentedItemDidMove(to newURL: URL) {
        state.withLock { $0 = newURL }
        tell("presentedItemDidMove(to: \(newURL.lastPathComponent))")
    }
    func accommodatePresentedItemDeletion() throws { tell("accommodatePresentedItemDeletion") }
}

/// The demo's second process: this same executable, started with a hidden role.
final class ChildProcess: @unchecked Sendable {
    private static let running = Mutex<[Process]>([])
    private let process = Process()
    private let output = Pipe()
    private let reader: FileHandle

    init(role: String, file: URL) throws {
        process.executableURL = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        process.arguments = ["demo", "--child-role", role, "--file", file.path]
        process.standardOutput = output
        reader = output.fileHandleForReading
        try process.run()
        Self.running.withLock { $0.append(process) }
    }

    private var buffer = ""

    private func nextLine() -> String? {
        while true {
            if let newline = buffer.firstIndex(of: "\n") {
                let line = String(buffer[..<newline])
                buffer.removeSubrange(...newline)
                return line
            }
            let data = reader.availableData
            if data.isEmpty { return nil }
            buffer += String(decoding: data, as: UTF8.self)
        }
    }

    /// Waits for the child to print `line`.
    func waitFor(_ line: String) {
        while let next = nextLine(), next != line {}
    }

    /// Prints the child's remaining output with `prefix`.
    func relay(prefix: String) {
        while let line = nextLine() { say(prefix + line) }
    }

    static func waitForAll() {
        for process in running.withLock({ $0 }) { process.waitUntilExit() }
        running.withLock { $0.removeAll() }
    }
}

/// What the child process does.
enum Child {
    static func run(role: String, file: URL) throws {
        let coordinator = FileCoordinator()
        switch role {
        case "append":
            say("asking")
            let start = Date()
            try coordinator.coordinate(writingItemAt: file) { url in
                say(String(format: "got the write lock after waiting %.2f s", Date().timeIntervalSince(start)))
                try (String(contentsOf: url, encoding: .utf8) + "child was here\n").write(
                    to: url,
                    atomically: false,
                    encoding: .utf8
                )
            }
            say("done writing")
        case "count":
            for _ in 0..<200 {
                try coordinator.updateContentsOfItem(at: file) {
                    Data(String((Int(String(decoding: $0 ?? Data(), as: UTF8.self)) ?? 0) + 1).utf8)
                }
            }
            say("added 200")
        default:
            throw ValidationError("unknown role \(role)")
        }
    }
}
