import ArgumentParser
import FileCoordination
import Foundation
import Synchronization

/// Two devices, one document, one conflict, resolved: told step by step.
struct Demo: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Two devices edit one document at once; the engine keeps both; one device keeps both edits."
    )
    @Flag(help: "Keep the demo's folders to look at.") var keep = false
    @Flag(help: "Use the stand-in for Syncthing even when rclone is installed.") var standIn = false

    func run() throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("documents-demo-\(UUID().uuidString)")
        let laptop = root.appendingPathComponent("laptop")
        let desktop = root.appendingPathComponent("desktop")
        for folder in [laptop, desktop] {
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        }
        defer {
            if keep { print("kept: \(root.path)") } else { try? FileManager.default.removeItem(at: root) }
        }
        let engine = SyncEngine(root: root, laptop: laptop, desktop: desktop, standIn: standIn)
        let document = "notes.md"
        let mine = laptop.appendingPathComponent(document)
        let theirs = desktop.appendingPathComponent(document)

        step("Both devices hold \(document), in step (the engine: \(engine.name))")
        for url in [mine, theirs] { try write("Groceries: milk\n", to: url, age: -60) }
        try engine.sync(first: true)

        let heard = Heard()
        let presenters = [
            DocumentPresenter(mine, label: "  laptop hears", say: heard.say),
            DocumentPresenter(theirs, label: "  desktop hears", say: heard.say),
        ]
        for presenter in presenters { FileCoordinator.addFilePresenter(presenter) }
        defer { for presenter in presenters { FileCoordinator.removeFilePresenter(presenter) } }

        step("Offline, the laptop adds eggs and the desktop adds bread")
        try write("Groceries: milk, eggs\n", to: mine, age: 10)
        try write("Groceries: milk, bread\n", to: theirs, age: 20)

        step("Back online, the engine meets two edits of one file and keeps both")
        try engine.sync()
        heard.wait {
            $0.contains("laptop hears: a conflict arrived") && $0.contains("desktop hears: a conflict arrived")
        }

        step("The laptop lists the conflict")
        for version in FileVersion.unresolvedConflictVersionsOfItem(at: mine) ?? [] { print("  " + describe(version)) }

        step("The laptop keeps both edits: `documents resolve \(document) --keep both`")
        try resolve(mine, keeping: .both)
        heard.wait { $0.contains("laptop hears: the version") }

        step("The engine carries the resolution to the desktop")
        try engine.sync()
        heard.wait { $0.contains("desktop hears: the version") }

        step("Both devices hold one file, with both edits")
        for (name, folder) in [("laptop", laptop), ("desktop", desktop)] {
            let files = try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { !$0.hasPrefix(".") }
            print("  \(name): \(files.sorted().joined(separator: ", "))")
        }
        print(
            String(decoding: try FileCoordinator().contentsOfItem(at: theirs), as: UTF8.self)
                .split(separator: "\n").map { "  | " + $0 }.joined(separator: "\n")
        )
    }

    private func step(_ text: String) { print("\n== \(text)") }

    /// Writes without coordination, as a user's editor on that device does, modified `age`
    /// seconds from now (engines compare modification times).
    private func write(_ text: String, to url: URL, age: TimeInterval) throws {
        try Data(text.utf8).write(to: url)
        try FileManager.default.setAttributes(
            [.modificationDate: Date().addingTimeInterval(age)],
            ofItemAtPath: url.path
        )
    }
}

/// What the presenters said, printed as it comes; the demo waits (bounded) for what it expects.
final class Heard: Sendable {
    private let lines = Mutex<[String]>([])

    var say: @Sendable (String) -> Void {
        { [self] line in
            print(line)
            lines.withLock { $0.append(line) }
        }
    }

    /// Waits up to ten seconds until `expected` holds of everything heard so far.
    func wait(_ expected: (String) -> Bool) {
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline {
            if expected(lines.withLock { $0.joined(separator: "\n") }) { return }
            Thread.sleep(forTimeInterval: 0.02)
        }
        printError("(the demo waited ten seconds for a message that did not come)")
    }
}

/// The engine between the two devices: rclone bisync when it is installed (Debian's 1.60 renames
/// both sides of a conflict), else a stand-in that does what Syncthing does (the older edit
/// becomes `NAME.sync-conflict-DATE-TIME-DEVICE.EXT` on both devices, the newer keeps the name).
final class SyncEngine {
    let root: URL
    let laptop: URL
    let desktop: URL
    private let rclone: String?
    /// The stand-in's memory: each file's content when the devices were last in step.
    private var base: [String: Data] = [:]

    init(root: URL, laptop: URL, desktop: URL, standIn: Bool) {
        self.root = root
        self.laptop = laptop
        self.desktop = desktop
        let installed = ["/usr/bin/rclone", "/usr/local/bin/rclone"].first {
            FileManager.default.isExecutableFile(atPath: $0)
        }
        self.rclone = standIn ? nil : installed
    }

    var name: String { rclone == nil ? "a stand-in for Syncthing" : "rclone bisync" }

    func sync(first: Bool = false) throws {
        if let rclone {
            let work = root.appendingPathComponent("work").path
            try run(
                rclone,
                ["bisync", laptop.path, desktop.path, "--workdir", work, "--force"] + (first ? ["--resync"] : [])
            )
        } else {
            try standIn(first: first)
        }
    }

    private func run(_ executable: String, _ arguments: [String]) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.merging(["RCLONE_CONFIG": "/dev/null"]) { $1 }
        process.standardError = FileHandle.nullDevice
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { throw ValidationError("\(executable) failed") }
    }

    /// Each file changed on one side goes to the other (a removal too); a file changed on both
    /// keeps the newer content and the older becomes a conflict copy, on both sides.
    private func standIn(first: Bool) throws {
        let files = FileManager.default
        let names = Set(
            try files.contentsOfDirectory(atPath: laptop.path) + files.contentsOfDirectory(atPath: desktop.path)
        )
        for name in names.sorted() where !name.hasPrefix(".") {
            let (a, b) = (laptop.appendingPathComponent(name), desktop.appendingPathComponent(name))
            let (dataA, dataB) = (try? Data(contentsOf: a), try? Data(contentsOf: b))
            let known = base[name]
            if first || dataA == dataB {
                base[name] = dataA ?? dataB
            } else if let dataA, let dataB, dataA != known, dataB != known {
                let dateA = try files.attributesOfItem(atPath: a.path)[.modificationDate] as? Date ?? .distantPast
                let dateB = try files.attributesOfItem(atPath: b.path)[.modificationDate] as? Date ?? .distantPast
                let (older, newer, loser) = dateA < dateB ? (dataA, dataB, "LAPTOP1") : (dataB, dataA, "DESKTP1")
                let stamp = DateFormatter()
                stamp.dateFormat = "yyyyMMdd-HHmmss"
                let ext = (name as NSString).pathExtension
                let copy =
                    (name as NSString).deletingPathExtension + ".sync-conflict-\(stamp.string(from: Date()))-"
                    + loser + (ext.isEmpty ? "" : "." + ext)
                for folder in [laptop, desktop] {
                    try older.write(to: folder.appendingPathComponent(copy), options: .atomic)
                    try newer.write(to: folder.appendingPathComponent(name), options: .atomic)
                }
                base[name] = newer
                base[copy] = older
            } else {
                let (changed, other) = dataA != known ? (dataA, b) : (dataB, a)
                if let changed {
                    try changed.write(to: other, options: .atomic)
                } else {
                    try? files.removeItem(at: other)
                }
                base[name] = changed
            }
        }
    }
}
