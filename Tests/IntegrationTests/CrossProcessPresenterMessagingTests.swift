import ConcordSystem
import ConcordTestSupport
import Foundation
import Synchronization
import Testing

@testable import FileCoordination

/// Presenters in other processes are asked first, as on Apple's platforms, and told afterwards
/// exactly once: real helper processes present, this process coordinates.
@Suite("Presenters in other processes are messaged by coordinations", .serialized)
struct CrossProcessPresenterMessagingTests {
    let directory = TemporaryDirectory("messaging")

    private func file(_ name: String = "notes.txt", _ text: String = "old") throws -> URL {
        let url = directory(name)
        try Data(text.utf8).write(to: url)
        return url
    }

    /// Puts `text` at `url` without coordination, in one step (written beside the folder, then
    /// renamed in), so watchers see one event however loaded the machine is.
    private func arrive(_ text: String, at url: URL) throws {
        let staging = directory("staging-\(UUID().uuidString)")
        try Data(text.utf8).write(to: staging)
        try FileSystem.rename(staging.path, to: url.path)
    }

    /// Renames `url` without coordination and waits until `helper`'s presenter `tag` hears it:
    /// every message about earlier changes has been printed by then (one serial queue per
    /// presenter, one watcher thread), so the messages read are the complete list.
    private func marker(_ url: URL, _ helpers: [PresentingProcess], tags: [String] = ["p0"]) throws {
        let moved = url.deletingLastPathComponent().appendingPathComponent("marker-" + url.lastPathComponent)
        try FileSystem.rename(url.path, to: moved.path)
        for helper in helpers {
            for tag in tags { #expect(helper.wait(for: "didMove:\(moved.lastPathComponent)", from: tag)) }
        }
    }

    @Test("A coordinated read asks the other process's presenter to save first, and reads what it saved")
    func saveBeforeRead() throws {
        let url = try file()
        let helper = try PresentingProcess([url], options: ["--save-text", "unsaved edits"])
        let text = try FileCoordinator().coordinate(readingItemAt: url) { url in
            // Asked before the reader runs; given back only after.
            helper.drain()
            #expect(helper.messages() == ["save", "relinquishToReader"])
            return try String(contentsOf: url, encoding: .utf8)
        }
        #expect(text == "unsaved edits")
        #expect(helper.wait(for: "reacquire"))
        try marker(url, [helper])
        #expect(helper.messages() == ["save", "relinquishToReader", "reacquire", "didMove:marker-notes.txt"])
    }

    @Test("A read without changes does not ask to save")
    func readWithoutChanges() throws {
        let url = try file()
        let helper = try PresentingProcess([url], options: ["--save-text", "unsaved edits"])
        let data = try FileCoordinator().contentsOfItem(at: url, options: .withoutChanges)
        #expect(String(decoding: data, as: UTF8.self) == "old")
        // The reacquirer's message and the marker's move reach the helper by different ways (a
        // message from this process, its own watch): it is waited for before the marker moves,
        // as in `saveBeforeRead`, or a loaded machine hears the move first.
        #expect(helper.wait(for: "reacquire"))
        try marker(url, [helper])
        #expect(helper.messages() == ["relinquishToReader", "reacquire", "didMove:marker-notes.txt"])
    }

    @Test("A write: relinquish first, the reacquirer after the access, then one didChange (none from inotify)")
    func writeRelinquishesAndTellsOnce() throws {
        let url = try file()
        let helper = try PresentingProcess([url])
        try FileCoordinator().coordinate(writingItemAt: url) { url in
            helper.drain()
            #expect(helper.messages() == ["relinquishToWriter"])
            try Data("new".utf8).write(to: url, options: .atomic)
        }
        try FileCoordinator().updateContentsOfItem(at: url) { _ in Data("merged".utf8) }
        try marker(url, [helper])
        #expect(
            helper.messages() == [
                "relinquishToWriter", "reacquire", "didChange",
                "save", "relinquishToWriter", "reacquire", "didChange",
                "didMove:marker-notes.txt",
            ]
        )
    }

    @Test("A coordinated move reaches the item's and the folder's presenters in another process once, with the new URL")
    func moveAnnouncedOnce() throws {
        let folder = directory.makeDirectory("folder")
        let url = folder.appendingPathComponent("draft.txt")
        try Data("old".utf8).write(to: url)
        let helper = try PresentingProcess([url, folder])
        let destination = folder.appendingPathComponent("final.txt")
        try FileCoordinator().moveItem(at: url, to: destination)
        #expect(helper.wait(for: "didMove:final.txt", from: "p0"))
        // The presenter follows: an uncoordinated rename of the new name is its next message.
        try marker(destination, [helper])
        #expect(
            helper.messages("p0") == [
                "relinquishToWriter", "reacquire", "didMove:final.txt", "didMove:marker-final.txt",
            ]
        )
        #expect(helper.wait(for: "subitemDidMove:final.txt->marker-final.txt", from: "p1"))
        #expect(
            helper.messages("p1") == [
                "subitemDidMove:draft.txt->final.txt", "subitemDidMove:final.txt->marker-final.txt",
            ]
        )
    }

    @Test("A deletion is accommodated first and not reported again afterwards")
    func deletionAccommodated() throws {
        let url = try file()
        let helper = try PresentingProcess([url])
        try FileCoordinator().removeItem(at: url)
        #expect(!FileManager.default.fileExists(atPath: url.path))
        // The presenter still presents the path: the item coming back is its next message.
        try arrive("back", at: url)
        #expect(helper.wait(for: "didChange"))
        #expect(helper.messages() == ["accommodateDeletion", "didChange"])
    }

    @Test("A presenter in another process vetoes a deletion: the coordination fails naming that process")
    func deletionVetoed() throws {
        let url = try file()
        let helper = try PresentingProcess([url], options: ["--veto-delete"])
        var accessorRan = false
        #expect {
            try FileCoordinator().coordinate(writingItemAt: url, options: .forDeleting) { _ in accessorRan = true }
        } throws: { error in
            guard let error = error as? FileCoordinationError else { return false }
            return error.code == .presenterFailed && error.presentingProcess == helper.pid
                && "\(error)".contains("process \(helper.pid)") && "\(error)".contains("the helper keeps this item")
        }
        #expect(!accessorRan)
        #expect(FileManager.default.fileExists(atPath: url.path))
        try marker(url, [helper])
        #expect(helper.messages() == ["accommodateDeletion", "didMove:marker-notes.txt"])
    }

    @Test(
        "A folder's presenter in another process gets the subitem messages, once each, and may veto a deletion inside"
    )
    func folderPresenter() throws {
        let folder = directory.makeDirectory("folder")
        let helper = try PresentingProcess([folder])
        let item = folder.appendingPathComponent("a.txt")
        let coordinator = FileCoordinator()
        try coordinator.replaceContentsOfItem(at: item, with: Data("1".utf8))
        try coordinator.replaceContentsOfItem(at: item, with: Data("2".utf8))
        try coordinator.removeItem(at: item)
        // Something nobody coordinated: its appearance is the last message.
        try arrive("m", at: folder.appendingPathComponent("marker.txt"))
        #expect(helper.wait(for: "subitemDidAppear:marker.txt"))
        #expect(
            helper.messages() == [
                "subitemDidAppear:a.txt", "subitemDidChange:a.txt", "subitemDeletion:a.txt",
                "subitemDidAppear:marker.txt",
            ]
        )

        let vetoing = try PresentingProcess([folder], options: ["--veto-delete"])
        #expect(
            coordinationCode { try coordinator.removeItem(at: folder.appendingPathComponent("marker.txt")) }
                == .presenterFailed
        )
        #expect(FileManager.default.fileExists(atPath: folder.appendingPathComponent("marker.txt").path))
        #expect(vetoing.wait(for: "subitemDeletion:marker.txt"))
    }

    @Test("A presenter that does not answer fails the coordination at the coordinator's timeout, naming its process")
    func unansweredTimesOut() throws {
        let url = try file()
        let helper = try PresentingProcess([url], options: ["--hang-save"])
        let coordinator = FileCoordinator()
        coordinator.timeout = .seconds(1)
        var caught: FileCoordinationError?
        let elapsed = milliseconds {
            do { _ = try coordinator.contentsOfItem(at: url) } catch { caught = error as? FileCoordinationError }
        }
        #expect(caught?.code == .timedOut)
        #expect(caught?.presentingProcess == helper.pid)
        #expect(elapsed >= 900 && elapsed < 10_000)
        #expect(helper.wait(for: "save"))
    }

    @Test(
        "A presenting process that is stopped (SIGSTOP) fails the coordination at its timeout, and is asked again once it runs"
    )
    func stoppedProcess() throws {
        let url = try file()
        let helper = try PresentingProcess([url])
        helper.child.kill(SIGSTOP)
        let coordinator = FileCoordinator()
        coordinator.timeout = .seconds(1)
        var caught: FileCoordinationError?
        let elapsed = milliseconds {
            do { try coordinator.replaceContentsOfItem(at: url, with: Data("new".utf8)) } catch {
                caught = error as? FileCoordinationError
            }
        }
        #expect(caught?.code == .timedOut)
        #expect(caught?.presentingProcess == helper.pid)
        #expect(elapsed < 10_000)
        #expect(try String(contentsOf: url, encoding: .utf8) == "old")
        helper.child.kill(SIGCONT)
        coordinator.timeout = .seconds(20)
        try coordinator.replaceContentsOfItem(at: url, with: Data("new".utf8))
        #expect(helper.wait(for: "didChange"))
    }

    @Test("With no timeout set, the presenter response limit bounds the wait")
    func responseLimitBoundsTheWait() throws {
        let url = try file()
        let helper = try PresentingProcess([url], options: ["--hang-save"])
        let saved = FileCoordinator.presenterResponseLimit
        FileCoordinator.presenterResponseLimit = .seconds(1)
        defer { FileCoordinator.presenterResponseLimit = saved }
        var caught: FileCoordinationError?
        let elapsed = milliseconds {
            do { _ = try FileCoordinator().contentsOfItem(at: url) } catch { caught = error as? FileCoordinationError }
        }
        #expect(caught?.code == .timedOut)
        #expect(caught?.presentingProcess == helper.pid)
        #expect(caught.map { "\($0)" }?.contains("presenter response limit") == true)
        #expect(elapsed < 10_000)
    }

    @Test("A presenting process killed with SIGKILL while it is being asked does not block the coordination")
    func killedMidMessage() throws {
        let url = try file()
        let helper = try PresentingProcess([url], options: ["--hang-save"])
        let done = Signal()
        let result = Mutex<String?>(nil)
        Thread.detachNewThread {
            let data = try? FileCoordinator().contentsOfItem(at: url)
            result.withLock { $0 = data.map { String(decoding: $0, as: UTF8.self) } }
            done.fire()
        }
        #expect(helper.wait(for: "save"))
        #expect(!done.wait(timeout: .zero))
        helper.child.kill(SIGKILL)
        // Well within the 30 s response limit: the connection closing says the process is gone.
        #expect(done.wait(timeout: .seconds(10)))
        #expect(result.withLock { $0 } == "old")
        #expect(helper.child.waitForExit(timeout: .seconds(10)) != nil)
        // Its entry is dropped the next time a coordination looks for it.
        let item = [CoordinatedItem(intent: .readingIntent(with: url), path: url.path, accessorURL: url)]
        _ = try FileCoordinator().contentsOfItem(at: url)
        #expect(!PresenterDirectory.shared.processes(involvedIn: item).contains(helper.pid))
    }

    @Test("Many presenters of one item in several processes are each asked and told once")
    func manyPresentersInSeveralProcesses() throws {
        let url = try file()
        let helpers = try (0..<3).map { _ in try PresentingProcess([url], options: ["--count", "3"]) }
        try FileCoordinator().replaceContentsOfItem(at: url, with: Data("new".utf8))
        let tags = ["p0", "p1", "p2"]
        try marker(url, helpers, tags: tags)
        for helper in helpers {
            for tag in tags {
                #expect(
                    helper.messages(tag) == [
                        "relinquishToWriter", "reacquire", "didChange", "didMove:marker-notes.txt",
                    ]
                )
            }
        }
    }

    @Test("Presenters registered and removed while a coordination waits for another process cause no deadlock")
    func registrationsDuringAWait() throws {
        let url = try file()
        let slow = try PresentingProcess([url], options: ["--save-delay", "1000"])
        let leaving = try PresentingProcess([url])
        let done = Signal()
        Thread.detachNewThread {
            _ = try? FileCoordinator().contentsOfItem(at: url)
            done.fire()
        }
        #expect(slow.wait(for: "save"))
        // While the coordination waits: one process starts presenting, another goes away.
        let arriving = try PresentingProcess([url])
        leaving.child.kill(SIGKILL)
        #expect(done.wait(timeout: .seconds(20)))
        // The next coordination asks the new one (and no longer the one that left).
        #expect(leaving.child.waitForExit(timeout: .seconds(10)) != nil)
        _ = try FileCoordinator().contentsOfItem(at: url)
        #expect(arriving.wait(for: "save"))
        #expect(arriving.wait(for: "reacquire"))
    }
}
