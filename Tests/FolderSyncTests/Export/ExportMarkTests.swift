import Foundation
import Persistence
import SyncTestKit
import Testing

@testable import FolderSync

@Suite("Export mark")
struct ExportMarkTests {
    /// The export mark (``SyncMetadata/outboxFrom``: the first log that may still have to be
    /// written) and the kept mark (``SyncMetadata/keptFrom``: the first outbox entry compaction
    /// has not released).
    static func marks(of store: any PersistentStore) throws -> (exported: UInt64, kept: UInt64) {
        let entries = try store.syncMetadata([SyncMetadata.outboxFrom, SyncMetadata.keptFrom])
        return (entries[SyncMetadata.outboxFrom] ?? 1, entries[SyncMetadata.keptFrom] ?? 1)
    }

    @Test(
        "Compaction that releases the outbox moves the export mark past it: later saves and exports do not look over the released logs again"
    )
    func releasedLogsLeaveTheExportMarkBehindThem() throws {
        let shared = CompactionTests.SharedContainer()
        for name in ["alpha", "beta"] { try shared.addDevice(name) }
        // Fewer saves than the batch after which a save moves the mark by itself.
        try shared.churn(rounds: 20)
        for device in shared.devices {
            try device.sync.importAvailable()
            try device.sync.publishAcknowledgement()
        }
        var removed = 0
        for device in shared.devices { removed += try device.sync.compact() }
        #expect(removed == 40)

        let alpha = shared.devices[0]
        let marks = try Self.marks(of: alpha.store)
        #expect(marks.kept == 21, "compaction released alpha's 20 logs")
        #expect(marks.exported >= marks.kept, "the export mark stayed below the released logs")

        // The next save goes out alone, and both devices still agree.
        try shared.churn(rounds: 1)
        #expect(try alpha.sync.lastLocalSequence() == 21)
        #expect(try Self.marks(of: alpha.store).exported >= marks.kept)
        for device in shared.devices { try device.sync.importAvailable() }
        #expect(try shared.contents(0) == shared.contents(1))
    }
}
