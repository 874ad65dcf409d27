import ConcordTestSupport
import FileCoordination
import Foundation
import Synchronization
import Testing

/// A presenter written as for Apple's `NSFilePresenter`: completion-handler hooks only, answered
/// later from another thread.
private final class CompletionHandlerPresenter: FilePresenter, @unchecked Sendable {
    let presentedItemURL: URL?
    let vetoDeletions: Bool
    let calls = Mutex<[String]>([])

    init(_ url: URL, vetoDeletions: Bool = false) {
        presentedItemURL = url
        self.vetoDeletions = vetoDeletions
    }

    private func answerLater(
        _ name: String,
        _ error: (any Error)?,
        _ handler: @escaping @Sendable ((any Error)?) -> Void
    ) {
        calls.withLock { $0.append(name) }
        Thread.detachNewThread {
            // The answer comes from another thread after the hook returned.
            handler(error)
        }
    }

    func savePresentedItemChanges(completionHandler: @escaping @Sendable ((any Error)?) -> Void) {
        // Writes the unsaved edit, then answers: a reader must see it.
        let url = presentedItemURL!
        calls.withLock { $0.append("save") }
        Thread.detachNewThread {
            completionHandler(Result { try Data("saved".utf8).write(to: url) }.failure)
        }
    }

    func accommodatePresentedItemDeletion(completionHandler: @escaping @Sendable ((any Error)?) -> Void) {
        answerLater("accommodateDeletion", vetoDeletions ? CocoaError(.fileWriteNoPermission) : nil, completionHandler)
    }

    func accommodatePresentedSubitemDeletion(
        at url: URL,
        completionHandler: @escaping @Sendable ((any Error)?) -> Void
    ) {
        answerLater(
            "subitemDeletion:\(url.lastPathComponent)",
            vetoDeletions ? CocoaError(.fileWriteNoPermission) : nil,
            completionHandler
        )
    }
}

/// The same, spelled as Apple's SDKs before Swift concurrency did: handlers not `@Sendable`.
private final class UnannotatedPresenter: FilePresenter, @unchecked Sendable {
    let presentedItemURL: URL?
    let saved = Signal()

    init(_ url: URL) { presentedItemURL = url }

    func savePresentedItemChanges(completionHandler: @escaping (Error?) -> Void) {
        saved.fire()
        completionHandler(nil)
    }
}

extension Result where Success == Void {
    fileprivate var failure: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}

@Suite("Apple's completion-handler presenter hooks")
struct AppleHookFormsTests {
    let directory = TemporaryDirectory("apple-hooks")

    @Test("savePresentedItemChanges(completionHandler:) runs before a reader, which waits for its answer")
    func saveWithCompletionHandler() throws {
        let file = directory("doc.txt")
        try Data("unsaved".utf8).write(to: file)
        let presenter = CompletionHandlerPresenter(file)
        FileCoordinator.addFilePresenter(presenter)
        defer { FileCoordinator.removeFilePresenter(presenter) }

        let text = try FileCoordinator().coordinate(readingItemAt: file) { url in
            try String(contentsOf: url, encoding: .utf8)
        }
        #expect(text == "saved")
        #expect(presenter.calls.withLock { $0 } == ["save"])
    }

    @Test("An error passed to accommodatePresentedItemDeletion(completionHandler:) vetoes the deletion")
    func deletionVetoedThroughCompletionHandler() throws {
        let file = directory("doc.txt")
        try Data("keep".utf8).write(to: file)
        let presenter = CompletionHandlerPresenter(file, vetoDeletions: true)
        FileCoordinator.addFilePresenter(presenter)
        defer { FileCoordinator.removeFilePresenter(presenter) }

        let code = coordinationCode {
            try FileCoordinator().coordinate(writingItemAt: file, options: .forDeleting) { url in
                try FileManager.default.removeItem(at: url)
            }
        }
        #expect(code == .presenterFailed)
        #expect(FileManager.default.fileExists(atPath: file.path))
        #expect(presenter.calls.withLock { $0 } == ["accommodateDeletion"])
    }

    @Test("accommodatePresentedSubitemDeletion(at:completionHandler:) is asked before a deletion inside the folder")
    func subitemDeletionWithCompletionHandler() throws {
        let folder = directory.makeDirectory("folder")
        let file = folder.appendingPathComponent("doc.txt")
        try Data("x".utf8).write(to: file)
        let presenter = CompletionHandlerPresenter(folder)
        FileCoordinator.addFilePresenter(presenter)
        defer { FileCoordinator.removeFilePresenter(presenter) }

        try FileCoordinator().coordinate(writingItemAt: file, options: .forDeleting) { url in
            try FileManager.default.removeItem(at: url)
        }
        #expect(presenter.calls.withLock { $0 }.first == "subitemDeletion:doc.txt")
        #expect(!FileManager.default.fileExists(atPath: file.path))
    }

    @Test("The pre-concurrency spelling (a handler that is not @Sendable) is called too")
    func unannotatedSpelling() throws {
        let file = directory("doc.txt")
        try Data("x".utf8).write(to: file)
        let presenter = UnannotatedPresenter(file)
        FileCoordinator.addFilePresenter(presenter)
        defer { FileCoordinator.removeFilePresenter(presenter) }

        try FileCoordinator().coordinate(readingItemAt: file) { _ in }
        #expect(presenter.saved.value == 1)
    }
}
