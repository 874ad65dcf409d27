import ConcordSystem
import ConcordTestSupport
import Foundation
import Synchronization
import Testing

@testable import FileCoordination

/// Registers presenters for one test and removes them afterwards.
final class Presenters {
    private var registered: [any FilePresenter] = []

    init() { WatchLimitLock.beginShared() }

    func present(_ url: URL) -> RecordingPresenter {
        let presenter = RecordingPresenter(url)
        add(presenter)
        return presenter
    }

    func add(_ presenter: any FilePresenter) {
        FileCoordinator.addFilePresenter(presenter)
        registered.append(presenter)
    }

    /// Waits until changes under `url` (and their inotify echo) have reached every presenter.
    func settle(_ url: URL) {
        try? PresenterWatching.shared.synchronize(url)
    }

    deinit {
        for presenter in registered { FileCoordinator.removeFilePresenter(presenter) }
        WatchLimitLock.endShared()
    }
}

@Suite("Presenter messaging around coordinated access")
struct PresenterMessagingTests {
    let directory = TemporaryDirectory("presenters")
    let presenters = Presenters()

    @Test("A read asks the presenter to save, then to relinquish, and gives the item back")
    func readMessages() throws {
        let file = directory("doc.txt")
        try Data("x".utf8).write(to: file)
        let presenter = presenters.present(file)
        try FileCoordinator().coordinate(readingItemAt: file) { _ in }
        #expect(presenter.wait(for: ["reacquire"]))
        #expect(presenter.messages == ["save", "relinquishToReader", "reacquire"])
    }

    @Test("withoutChanges reads do not ask the presenter to save")
    func readWithoutChanges() throws {
        let file = directory("doc.txt")
        let presenter = presenters.present(file)
        try FileCoordinator().coordinate(readingItemAt: file, options: .withoutChanges) { _ in }
        #expect(presenter.wait(for: ["reacquire"]))
        #expect(presenter.messages == ["relinquishToReader", "reacquire"])
    }

    @Test("A write asks the presenter to relinquish before the accessor and tells it afterwards")
    func writeMessages() throws {
        let file = directory("doc.txt")
        try Data("old".utf8).write(to: file)
        let presenter = presenters.present(file)
        let seenByAccessor = Mutex<[String]>([])
        try FileCoordinator().coordinate(writingItemAt: file) { url in
            seenByAccessor.withLock { $0 = presenter.messages }
            try Data("new".utf8).write(to: url)
        }
        #expect(presenter.wait(for: ["didChange"]))
        presenters.settle(directory.url)
        #expect(seenByAccessor.withLock { $0 } == ["relinquishToWriter"])
        #expect(presenter.messages == ["relinquishToWriter", "reacquire", "didChange"])
    }

    @Test("forMerging asks the presenter to save first")
    func mergingSaves() throws {
        let file = directory("doc.txt")
        try Data("old".utf8).write(to: file)
        let presenter = presenters.present(file)
        try FileCoordinator().coordinate(writingItemAt: file, options: .forMerging) { _ in }
        #expect(presenter.wait(for: ["didChange"]))
        presenters.settle(directory.url)
        #expect(presenter.messages == ["save", "relinquishToWriter", "reacquire", "didChange"])
    }

    @Test("Deleting tells the item's presenter, presenters inside it, and the directory's presenter")
    func deletionMessages() throws {
        let folder = directory.makeDirectory("folder", "inner")
        let file = folder.appendingPathComponent("doc.txt")
        try Data("x".utf8).write(to: file)
        let itemPresenter = presenters.present(folder)
        let insidePresenter = presenters.present(file)
        let parentPresenter = presenters.present(directory.url)
        try FileCoordinator().removeItem(at: folder)
        presenters.settle(directory.url)
        #expect(!FileManager.default.fileExists(atPath: folder.path))
        #expect(itemPresenter.messages == ["accommodateDeletion"])
        #expect(insidePresenter.messages == ["accommodateDeletion"])
        #expect(parentPresenter.messages == ["subitemDeletion:inner"])
    }

    @Test("A presenter can veto by throwing; the accessor then never runs")
    func veto() throws {
        struct Refusal: Error {}
        let file = directory("doc.txt")
        let presenter = presenters.present(file)
        presenter.onMessage("save") { throw Refusal() }
        var ran = false
        var caught: FileCoordinationError?
        do {
            try FileCoordinator().coordinate(readingItemAt: file) { _ in ran = true }
        } catch let error as FileCoordinationError {
            caught = error
        }
        #expect(!ran)
        #expect(caught?.code == .presenterFailed)
        #expect(caught?.underlyingError is Refusal)
    }

    @Test("A directory's presenter hears of items appearing and changing inside it")
    func subitemAppearAndChange() throws {
        let folder = directory.makeDirectory("folder")
        let file = folder.appendingPathComponent("new.txt")
        let folderPresenter = presenters.present(folder)
        let coordinator = FileCoordinator()
        try coordinator.replaceContentsOfItem(at: file, with: Data("1".utf8))
        try coordinator.replaceContentsOfItem(at: file, with: Data("2".utf8))
        #expect(folderPresenter.wait(count: 2))
        presenters.settle(directory.url)
        #expect(folderPresenter.messages == ["subitemDidAppear:new.txt", "subitemDidChange:new.txt"])
    }

    @Test("A move tells the item's presenter where it went and the directory's presenter what moved")
    func moveMessages() throws {
        let folder = directory.makeDirectory("folder")
        let source = folder.appendingPathComponent("a.txt")
        let destination = folder.appendingPathComponent("b.txt")
        try Data("x".utf8).write(to: source)
        let itemPresenter = presenters.present(source)
        let folderPresenter = presenters.present(folder)
        try FileCoordinator().moveItem(at: source, to: destination)
        #expect(itemPresenter.wait(for: ["didMove:b.txt"]))
        #expect(itemPresenter.messages == ["relinquishToWriter", "reacquire", "didMove:b.txt"])
        #expect(itemPresenter.presentedItemURL?.path == destination.path)
        #expect(folderPresenter.wait(for: ["subitemDidMove:a.txt->b.txt"]))
        presenters.settle(directory.url)
        #expect(itemPresenter.messages == ["relinquishToWriter", "reacquire", "didMove:b.txt"])
        #expect(folderPresenter.messages == ["subitemDidMove:a.txt->b.txt"])
    }

    @Test("The presenter a coordinator acts for hears nothing of that coordinator's accesses")
    func originatingPresenterIsExcluded() throws {
        let file = directory("doc.txt")
        let mine = presenters.present(file)
        let other = presenters.present(file)
        try FileCoordinator(filePresenter: mine).replaceContentsOfItem(at: file, with: Data("x".utf8))
        #expect(other.wait(for: ["didChange"]))
        // A read by someone else is queued behind anything already sent to `mine`.
        try FileCoordinator().coordinate(readingItemAt: file) { _ in }
        #expect(mine.wait(for: ["reacquire"]))
        #expect(other.wait(count: 6))
        presenters.settle(directory.url)
        #expect(mine.messages == ["save", "relinquishToReader", "reacquire"])
        #expect(
            other.messages == [
                "relinquishToWriter", "reacquire", "didChange", "save", "relinquishToReader", "reacquire",
            ]
        )
    }

    @Test("Each presenter gets its messages one at a time and in order")
    func serialAndOrdered() throws {
        final class Serial: FilePresenter, @unchecked Sendable {
            let url: URL
            let inFlight = Atomic<Int>(0)
            let maximum = Atomic<Int>(0)
            let names = Mutex<[String]>([])
            let received = Signal()
            init(_ url: URL) { self.url = url }
            var presentedItemURL: URL? { url }
            func presentedSubitemDidAppear(at url: URL) {
                let now = inFlight.add(1, ordering: .relaxed).newValue
                maximum.max(now, ordering: .relaxed)
                // (A window for another message to overlap this one: 100 µs by the clock. Two
                // hundred `sched_yield` calls made it, until a loaded machine made each yield
                // wait a time slice: 100 messages then took longer than the test's bound.)
                let until = ContinuousClock.now + .microseconds(100)
                while ContinuousClock.now < until {}
                names.withLock { $0.append(url.lastPathComponent) }
                inFlight.subtract(1, ordering: .relaxed)
                received.fire()
            }
        }
        let folder = directory.makeDirectory("folder")
        let presenter = Serial(folder)
        presenters.add(presenter)
        let writers = 4
        let writes = 25
        let done = Signal()
        for writer in 0..<writers {
            Thread.detachNewThread {
                let coordinator = FileCoordinator()
                for index in 0..<writes {
                    let file = folder.appendingPathComponent("w\(writer)-\(index)")
                    try? coordinator.replaceContentsOfItem(at: file, with: Data())
                }
                done.fire()
            }
        }
        #expect(done.wait(times: writers, timeout: .seconds(60)))
        #expect(presenter.received.wait(times: writers * writes, timeout: .seconds(30)))
        let maximum = presenter.maximum.load(ordering: .relaxed)
        #expect(maximum == 1, "messages overlapped")
        let names = presenter.names.withLock { $0 }
        for writer in 0..<writers {
            // What one thread did in order, its presenter hears in that order.
            let mine = names.filter { $0.hasPrefix("w\(writer)-") }
            #expect(mine == (0..<writes).map { "w\(writer)-\($0)" })
        }
    }

    @Test("A presenter that coordinates inside its own hooks does not deadlock the process")
    func presenterCoordinatesInsideItsCallback() throws {
        let file = directory("doc.txt")
        try Data("0".utf8).write(to: file)
        let presenter = presenters.present(file)
        let inner = Signal()
        // Saving writes the file through a coordinator acting for the presenter (Apple's
        // pattern); relinquishing reads it through an anonymous coordinator, which messages the
        // presenter itself, on its own queue, while it is still inside this hook.
        presenter.onMessage("save") { [presenter] in
            let coordinator = FileCoordinator(filePresenter: presenter)
            coordinator.timeout = .seconds(5)
            try coordinator.replaceContentsOfItem(at: file, with: Data("saved".utf8))
            inner.fire()
        }
        presenter.onMessage("relinquishToReader") {
            let coordinator = FileCoordinator()
            coordinator.timeout = .seconds(5)
            _ = try coordinator.contentsOfItem(at: file)
            inner.fire()
        }
        presenter.onMessage("didChange") {
            let coordinator = FileCoordinator()
            coordinator.timeout = .seconds(5)
            try coordinator.coordinate(writingItemAt: file) { _ in }
            inner.fire()
        }
        let reader = FileCoordinator()
        reader.timeout = .seconds(10)
        let content = Mutex("")
        #expect(
            finishes(within: .seconds(20)) {
                let read = try? reader.coordinate(readingItemAt: file) {
                    String(decoding: try Data(contentsOf: $0), as: UTF8.self)
                }
                content.withLock { $0 = read ?? "failed" }
            }
        )
        #expect(content.withLock { $0 } == "saved")
        #expect(inner.wait(times: 2, timeout: .seconds(10)))

        // And a write whose didChange hook itself writes the file finishes too.
        let writer = FileCoordinator()
        writer.timeout = .seconds(10)
        #expect(finishes(within: .seconds(20)) { try? writer.coordinate(writingItemAt: file) { _ in } })
        #expect(inner.wait(times: 3, timeout: .seconds(10)))
    }

    @Test("A presenter that relinquishes later, from another thread, is waited for")
    func asynchronousRelinquish() throws {
        final class Slow: FilePresenter, @unchecked Sendable {
            let url: URL
            let released = Atomic<Bool>(false)
            init(_ url: URL) { self.url = url }
            var presentedItemURL: URL? { url }
            func relinquishPresentedItem(toWriter writer: @escaping @Sendable ((@Sendable () -> Void)?) -> Void) {
                Thread.detachNewThread { [self] in
                    for _ in 0..<10_000 { sched_yield() }
                    self.released.store(true, ordering: .sequentiallyConsistent)
                    writer(nil)
                }
            }
        }
        let file = directory("doc.txt")
        let presenter = Slow(file)
        presenters.add(presenter)
        var releasedBeforeAccess = false
        try FileCoordinator().coordinate(writingItemAt: file) { _ in
            releasedBeforeAccess = presenter.released.load(ordering: .sequentiallyConsistent)
        }
        #expect(releasedBeforeAccess)
    }

    @Test("A presenter that relinquishes after the coordination gave up still gets its item back")
    func lateRelinquishIsReacquired() throws {
        final class Late: FilePresenter, @unchecked Sendable {
            let url: URL
            let release = Signal()
            let reacquired = Signal()
            init(_ url: URL) { self.url = url }
            var presentedItemURL: URL? { url }
            func relinquishPresentedItem(toWriter writer: @escaping @Sendable ((@Sendable () -> Void)?) -> Void) {
                Thread.detachNewThread { [self] in
                    release.wait(timeout: .seconds(30))
                    writer { self.reacquired.fire() }
                }
            }
        }
        let file = directory("doc.txt")
        let presenter = Late(file)
        presenters.add(presenter)
        let coordinator = FileCoordinator()
        coordinator.timeout = .milliseconds(100)
        var ran = false
        #expect(coordinationCode { try coordinator.coordinate(writingItemAt: file) { _ in ran = true } } == .timedOut)
        #expect(!ran)
        presenter.release.fire()
        #expect(presenter.reacquired.wait(timeout: .seconds(10)))
    }
}
