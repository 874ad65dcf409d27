import ConcordTestSupport
import FolderSync
import Foundation
import Persistence
import SyncTestKit
import Testing

/// A save and its export are separate outcomes: a committed save is saved, whatever happens to
/// its log; a log the container cannot take waits in the outbox, is reported as
/// `SyncEvent.exportDeferred` naming the file in the way, and reaches the others once the
/// container takes it again. Nothing is saved twice, nothing is lost.
@Suite("Export failures")
struct ExportFailureTests {
    /// Puts a file where `name`'s device folder should be (what a full, read-only or broken
    /// container looks like to the writer, even to root); returns a function that undoes it.
    static func blockDeviceFolder(_ bench: SyncTestBench, _ name: String) throws -> () throws -> Void {
        let folder = ContainerLayout(container: bench[name].view, storeName: SyncTestBench.storeName).deviceFolder(name)
        let aside = folder.deletingLastPathComponent().appendingPathComponent(".\(name).aside")
        if FileManager.default.fileExists(atPath: folder.path) {
            try FileManager.default.moveItem(at: folder, to: aside)
        }
        // Live sync may make its folder again (healing) between the move and the write: that
        // folder holds nothing the one put aside lacks, and goes; the file is written again.
        var attempts = 0
        while true {
            do {
                try Data("in the way".utf8).write(to: folder, options: .withoutOverwriting)
                break
            } catch {
                attempts += 1
                var isFolder: ObjCBool = false
                guard attempts < 100, FileManager.default.fileExists(atPath: folder.path, isDirectory: &isFolder),
                    isFolder.boolValue
                else { throw error }
                try? FileManager.default.removeItem(at: folder)
            }
        }
        return {
            try FileManager.default.removeItem(at: folder)
            if FileManager.default.fileExists(atPath: aside.path) {
                try FileManager.default.moveItem(at: aside, to: folder)
            }
        }
    }

    @Test(
        "a save whose export fails is saved once: the export throws and reports the file, the log waits, the others get it later"
    )
    func failedExportKeepsTheSave() throws {
        let bench = SyncTestBench()
        try bench.addDevice("alpha")
        try bench.addDevice("beta")
        _ = try bench.addNote("alpha", "before")
        let unblock = try Self.blockDeviceFolder(bench, "alpha")
        // The save itself succeeds: its log is committed to the outbox with it.
        let note = try bench.edit("alpha", export: false) { context in
            _ = try context.insert(entity: "Note", values: ["title": .string("while blocked")])
        }[0].id
        #expect(try bench["alpha"].store.records(with: [note]).count == 1)
        bench["alpha"].log.reset()
        let error = try #require(throws: SyncError.self) { try bench["alpha"].sync.exportPending() }
        let deferred = bench["alpha"].log.events.compactMap { event -> SyncError? in
            if case .exportDeferred(let error) = event { return error } else { return nil }
        }
        #expect(deferred.count == 1, "one exportDeferred event: \(bench["alpha"].log.events)")
        #expect(deferred.first?.url != nil && error.url != nil, "the error names the file in the way: \(error)")
        #expect(try bench["alpha"].sync.lastLocalSequence() == 2)
        // Later saves pile up behind it, still saved.
        _ = try bench.edit("alpha", export: false) { context in
            _ = try context.insert(entity: "Note", values: ["title": .string("also while blocked")])
        }
        #expect(throws: SyncError.self) { try bench["alpha"].sync.exportPending() }
        try unblock()
        #expect(try bench["alpha"].sync.exportPending() == 2, "both waiting logs written once the container takes them")
        #expect(try bench["alpha"].sync.exportPending() == 0, "and not again")
        try bench.deliverEverything()
        _ = try bench.importOn("beta")
        #expect(try bench.titles("beta") == ["also while blocked", "before", "while blocked"])
    }

    @Test("with live sync, a save while the container refuses logs returns normally; the event says the export waits")
    func liveSaveIsNotAFailure() throws {
        let bench = SyncTestBench()
        try bench.addDevice("alpha")
        let sync = bench["alpha"].sync
        try sync.start()
        defer { sync.stop() }
        sync.waitForQueuedWork()
        let unblock = try Self.blockDeviceFolder(bench, "alpha")
        let deferred = Signal()
        let token = NotificationCenter.default.addObserver(forName: .concordSyncEvent, object: sync, queue: nil) {
            note in
            if case .exportDeferred? = note.userInfo?["event"] as? SyncEvent { deferred.fire() }
        }
        defer { NotificationCenter.default.removeObserver(token) }
        _ = try bench.edit("alpha", export: false) { context in
            _ = try context.insert(entity: "Note", values: ["title": .string("live")])
        }
        #expect(deferred.wait(timeout: .seconds(20)), "no exportDeferred event: \(bench["alpha"].log.events)")
        try unblock()
        try sync.exportPending()
        let layout = ContainerLayout(container: bench["alpha"].view, storeName: SyncTestBench.storeName)
        #expect(FileManager.default.fileExists(atPath: layout.logURL(device: "alpha", sequence: 1).path))
    }
}
