import ConcordTestSupport
import Foundation
import Persistence
import SyncTestKit
import Testing

@testable import FolderSync

/// Sync that was stopped applies nothing: an import after ``FolderSync/stop()`` left the saves
/// (live sync's import queued before the stop, an app driving sync by hand) would commit without
/// sync's bookkeeping, and the duplicates its save removed would live on in the history while the
/// store lacks them (a real-engine run, rclone: a folder named like one of the desktop's).
@Suite("Imports after a stop")
struct StoppedSyncImportTests {
    @Test(
        "an import after the stop is refused with nothing applied; sync set up again imports it with the removed duplicate recorded"
    )
    func importAfterStopIsRefused() throws {
        let (winner, loser) = (DuplicateRedirectTests.winner, DuplicateRedirectTests.loser)
        let bench = try DuplicateRedirectTests.workFolders(alpha: winner, beta: loser)
        let note = try bench.edit("beta") { context in
            var note = try context.insert(entity: "Note", values: ["title": .string("filed on beta")])
            note.toOne["folder"] = loser
            try context.update(note)
        }[0].id
        try bench.deliverEverything()
        let before = try bench.contents("alpha")
        bench["alpha"].sync.stop()
        #expect {
            try bench["alpha"].sync.importAvailable()
        } throws: { error in
            (error as? SyncError)?.code == .invalidState && (error as? SyncError)?.url == bench["alpha"].store.url
        }
        #expect(try bench.contents("alpha") == before, "nothing applied")
        #expect(try bench["alpha"].sync.historyMismatches().isEmpty)
        #expect(throws: SyncError.self) { try bench["alpha"].sync.startFromBaseline() }

        // The next launch imports it all, with the removal recorded: the note lands in the
        // winner, a late reference to the loser would too, and the history is in step.
        try bench.restart("alpha")
        let alpha = bench["alpha"]
        alpha.coordinator.policies.register(Deduplicate("Folder", .key(["name"])))
        try bench.importOn("alpha")
        #expect(try alpha.store.records(with: [loser]).isEmpty)
        #expect(try alpha.store.records(with: [note]).first?.toOne["folder"] == winner)
        #expect(try alpha.store.hasSyncMetadata(SyncMetadata.redirect(loser)))
        #expect(try alpha.sync.historyMismatches().isEmpty)
    }
}
