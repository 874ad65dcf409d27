import ArgumentParser
import FileCoordination
import Foundation

/// `documents`: a small document app on Concord's public `FileCoordination` product. Documents
/// are plain files in a folder a file-sync engine carries (Syncthing, Dropbox, Nextcloud, rclone,
/// unison); when two devices edit one at once, the engine keeps both, and this app shows the
/// conflict and resolves it: keep mine, keep theirs, or keep both.
@main
struct Documents: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "documents",
        abstract: "Plain-text documents in a synced folder, with their conflicts resolved (a Concord sample).",
        subcommands: [Open.self, Edit.self, Watch.self, Conflicts.self, Resolve.self, Demo.self]
    )
}

/// Prints the document (a coordinated read: presenters in other processes save first).
struct Open: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Print a document.")
    @Argument(help: "The document.") var path: String

    func run() throws {
        let data = try FileCoordinator().contentsOfItem(at: URL(fileURLWithPath: path))
        print(String(decoding: data, as: UTF8.self), terminator: "")
        let conflicts = FileVersion.unresolvedConflictVersionsOfItem(at: URL(fileURLWithPath: path)) ?? []
        if !conflicts.isEmpty { printError("\(conflicts.count) unresolved conflict(s): documents conflicts \(path)") }
    }
}

/// Replaces the document's text (a coordinated, atomic write).
struct Edit: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Replace a document's text.")
    @Argument(help: "The document.") var path: String
    @Argument(help: "The new text.") var text: String

    func run() throws {
        try FileCoordinator().replaceContentsOfItem(at: URL(fileURLWithPath: path), with: Data((text + "\n").utf8))
    }
}

/// Presents the document and prints what it hears until stopped: changes, and conflict versions
/// gained, resolved and lost, whoever made them.
struct Watch: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Print what happens to a document until Ctrl-C.")
    @Argument(help: "The document.") var path: String
    @Option(help: "Stop after this many seconds.") var seconds: Double?

    func run() throws {
        let presenter = DocumentPresenter(URL(fileURLWithPath: path), label: "") { print($0) }
        FileCoordinator.addFilePresenter(presenter)
        defer { FileCoordinator.removeFilePresenter(presenter) }
        print("watching \(path)")
        if let seconds {
            Thread.sleep(forTimeInterval: seconds)
        } else {
            while true { Thread.sleep(forTimeInterval: 3600) }
        }
    }
}

/// Lists the document's unresolved conflict versions.
struct Conflicts: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "List a document's unresolved conflicts.")
    @Argument(help: "The document.") var path: String

    func run() throws {
        let versions = FileVersion.unresolvedConflictVersionsOfItem(at: URL(fileURLWithPath: path)) ?? []
        if versions.isEmpty { print("no conflicts") }
        for version in versions { print(describe(version)) }
    }
}

/// Resolves the document's conflicts.
struct Resolve: ParsableCommand {
    enum Choice: String, ExpressibleByArgument, CaseIterable {
        case mine, theirs, both
    }

    static let configuration = CommandConfiguration(
        abstract: "Resolve a document's conflicts: keep mine, theirs (the newest other version), or both."
    )
    @Argument(help: "The document.") var path: String
    @Option(help: "mine, theirs or both.") var keep: Choice

    func run() throws {
        try resolve(URL(fileURLWithPath: path), keeping: keep)
    }
}

/// Resolves the conflicts of `url`: the kept content goes in place, every conflict version is
/// marked resolved, and the engine's copies are removed (the engine carries that to every device).
func resolve(_ url: URL, keeping choice: Resolve.Choice) throws {
    let conflicts = FileVersion.unresolvedConflictVersionsOfItem(at: url) ?? []
    guard !conflicts.isEmpty else {
        print("no conflicts")
        return
    }
    let coordinator = FileCoordinator()
    switch choice {
    case .mine:
        break
    case .theirs:
        // The newest other version; when the item itself is gone (rclone bisync renames both
        // sides), the first one takes its place.
        try conflicts.last!.replaceItem(at: url)
    case .both:
        var theirs = Data()
        for version in conflicts {
            theirs.append(Data("--- from \(version.localizedNameOfSavingComputer ?? "another device"):\n".utf8))
            theirs.append(try coordinator.contentsOfItem(at: version.url))
        }
        try coordinator.updateContentsOfItem(at: url) { current in (current ?? Data()) + theirs }
    }
    for version in conflicts { version.isResolved = true }
    try FileVersion.removeOtherVersionsOfItem(at: url)
    print("resolved \(conflicts.count) conflict(s) of \(url.lastPathComponent), keeping \(choice.rawValue)")
}

func describe(_ version: FileVersion) -> String {
    let date = version.modificationDate.map { ISO8601DateFormatter().string(from: $0) } ?? "?"
    return "\(version.url.lastPathComponent)  engine: \(version.engine ?? "local")  "
        + "device: \(version.localizedNameOfSavingComputer ?? "?")  modified: \(date)"
}

func printError(_ line: String) {
    FileHandle.standardError.write(Data((line + "\n").utf8))
}
