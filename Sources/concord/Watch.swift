#if canImport(Glibc)
import Glibc
#endif
import ArgumentParser
import FileCoordination
import Foundation
import Synchronization

/// `concord watch PATH`: a coordinated, presenter-level `inotifywait`.
struct Watch: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Present PATH and print every message its presenter receives, until interrupted.",
        discussion: """
            Registers a FilePresenter for PATH (a file or a directory) and prints one line per \
            message: changes, moves and deletions made by any process, coordinated or not.
            """)

    @Argument(help: "The file or directory to present.")
    var path: String

    @Option(help: "Milliseconds to gather a burst of changes into one message (0: none).")
    var settle: Int = 10

    func run() throws {
        let url = URL(fileURLWithPath: path).standardizedFileURL
        guard FileManager.default.fileExists(atPath: FileManager.default.currentDirectoryPath) else {
            throw ValidationError("no current directory")
        }
        FileCoordinator.presenterSettleWindow = .milliseconds(settle)
        let presenter = LinePresenter(url: url)
        FileCoordinator.addFilePresenter(presenter)
        say("watching \(url.path)")
        // The presenter's queue prints; this thread only waits for an interrupt.
        withExtendedLifetime(presenter) {
            while true { pause() }
        }
    }
}

/// Prints each message, one line, with the time.
final class LinePresenter: FilePresenter, @unchecked Sendable {
    private let url: Mutex<URL>
    init(url: URL) { self.url = Mutex(url) }
    var presentedItemURL: URL? { url.withLock { $0 } }

    private func line(_ text: String) {
        let now = Date()
        let stamp = String(format: "%.3f", now.timeIntervalSince1970)
        say("\(stamp) \(text)")
    }

    func presentedItemDidChange() { line("presentedItemDidChange \(presentedItemURL?.path ?? "")") }
    func presentedItemDidMove(to newURL: URL) {
        line("presentedItemDidMove \(presentedItemURL?.path ?? "") -> \(newURL.path)")
        url.withLock { $0 = newURL }
    }
    func accommodatePresentedItemDeletion() throws { line("accommodatePresentedItemDeletion \(presentedItemURL?.path ?? "")") }
    func presentedSubitemDidAppear(at url: URL) { line("presentedSubitemDidAppear \(url.path)") }
    func presentedSubitemDidChange(at url: URL) { line("presentedSubitemDidChange \(url.path)") }
    func presentedSubitem(at oldURL: URL, didMoveTo newURL: URL) { line("presentedSubitemDidMove \(oldURL.path) -> \(newURL.path)") }
    func accommodatePresentedSubitemDeletion(at url: URL) throws { line("accommodatePresentedSubitemDeletion \(url.path)") }
    func savePresentedItemChanges() throws { line("savePresentedItemChanges") }
    func relinquishPresentedItem(toReader reader: @escaping @Sendable ((@Sendable () -> Void)?) -> Void) {
        line("relinquishPresentedItem(toReader:)")
        reader(nil)
    }
    func relinquishPresentedItem(toWriter writer: @escaping @Sendable ((@Sendable () -> Void)?) -> Void) {
        line("relinquishPresentedItem(toWriter:)")
        writer(nil)
    }
}
