import ArgumentParser
import FileCoordination
import Foundation
import Synchronization

/// `concord watch PATH`: a coordinated, presenter-level `inotifywait`.
struct Watch: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Present PATH and print every message its presenter receives, until it is deleted or interrupted.",
        discussion: """
            Registers a FilePresenter for PATH (a file or a directory) and prints one line per \
            message: changes, moves and deletions made by any process, coordinated or not, and the \
            conflict copies file-sync engines make beside it (gained, resolved, lost), each \
            line starting with an ISO 8601 timestamp (UTC). Status goes to standard error. A path \
            that does not exist is an error (exit status 1); when the item is deleted, the command \
            says so and ends.
            """
    )

    @Argument(help: "The file or directory to present.")
    var path: String

    @Option(help: "Milliseconds to gather a burst of changes into one message (0: none).")
    var settle: Int = 10

    func run() throws {
        let url = URL(fileURLWithPath: path).standardizedFileURL
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: url.path, isDirectory: &isDirectory) else {
            throw Output.fail("\(url.path): no such file or folder: nothing to watch", status: 1)
        }
        FileCoordinator.presenterSettleWindow = .milliseconds(settle)
        let deleted = DispatchSemaphore(value: 0)
        let presenter = LinePresenter(url: url) { deleted.signal() }
        FileCoordinator.addFilePresenter(presenter)
        Output.status(
            "concord: watching \(url.path) (\(isDirectory.boolValue ? "a folder" : "a file")); interrupt to stop"
        )
        // The presenter's queue prints; this thread waits until the item is deleted (or an interrupt).
        withExtendedLifetime(presenter) { deleted.wait() }
        FileCoordinator.removeFilePresenter(presenter)
        Output.status("concord: \(url.path) was deleted; stopped watching")
    }
}

/// Prints each message, one line, with the time.
final class LinePresenter: FilePresenter, @unchecked Sendable {
    private let url: Mutex<URL>
    private let onDeletion: @Sendable () -> Void
    init(url: URL, onDeletion: @escaping @Sendable () -> Void) {
        self.url = Mutex(url)
        self.onDeletion = onDeletion
    }
    var presentedItemURL: URL? { url.withLock { $0 } }

    private func line(_ text: String) {
        Output.data("\(Output.timestamp(Date())) \(text)")
    }

    func presentedItemDidChange() { line("presentedItemDidChange \(presentedItemURL?.path ?? "")") }
    func presentedItemDidMove(to newURL: URL) {
        line("presentedItemDidMove \(presentedItemURL?.path ?? "") -> \(newURL.path)")
        url.withLock { $0 = newURL }
    }
    func accommodatePresentedItemDeletion() throws {
        line("accommodatePresentedItemDeletion \(presentedItemURL?.path ?? "")")
        onDeletion()
    }
    func presentedSubitemDidAppear(at url: URL) { line("presentedSubitemDidAppear \(url.path)") }
    func presentedSubitemDidChange(at url: URL) { line("presentedSubitemDidChange \(url.path)") }
    func presentedSubitem(at oldURL: URL, didMoveTo newURL: URL) {
        line("presentedSubitemDidMove \(oldURL.path) -> \(newURL.path)")
    }
    func accommodatePresentedSubitemDeletion(at url: URL) throws {
        line("accommodatePresentedSubitemDeletion \(url.path)")
    }
    func savePresentedItemChanges() throws { line("savePresentedItemChanges") }
    func relinquishPresentedItem(toReader reader: @escaping @Sendable ((@Sendable () -> Void)?) -> Void) {
        line("relinquishPresentedItem(toReader:)")
        reader(nil)
    }
    func relinquishPresentedItem(toWriter writer: @escaping @Sendable ((@Sendable () -> Void)?) -> Void) {
        line("relinquishPresentedItem(toWriter:)")
        writer(nil)
    }
    func presentedItemDidGain(_ version: FileVersion) { line("presentedItemDidGain \(describe(version))") }
    func presentedItemDidLose(_ version: FileVersion) { line("presentedItemDidLose \(version.url.path)") }
    func presentedItemDidResolveConflict(_ version: FileVersion) {
        line("presentedItemDidResolveConflict \(version.url.path)")
    }
    func presentedSubitem(at url: URL, didGain version: FileVersion) {
        line("presentedSubitemDidGain \(url.path) \(describe(version))")
    }
    func presentedSubitem(at url: URL, didLose version: FileVersion) {
        line("presentedSubitemDidLose \(url.path) \(version.url.path)")
    }
    func presentedSubitem(at url: URL, didResolve version: FileVersion) {
        line("presentedSubitemDidResolveConflict \(url.path) \(version.url.path)")
    }

    /// A version's file, and the engine and device its name says made it.
    private func describe(_ version: FileVersion) -> String {
        "\(version.url.path) (\(version.engine ?? "local")\(version.localizedNameOfSavingComputer.map { ", \($0)" } ?? ""))"
    }
}
