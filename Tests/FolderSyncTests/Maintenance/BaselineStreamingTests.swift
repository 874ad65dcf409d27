import ConcordTestSupport
import Foundation
import Persistence
import SyncTestKit
import Testing

@testable import FolderSync

/// Baselines are written from a spool and read through a window, batch by batch: a store of
/// hundreds of thousands of records is never held whole (`make test-memory` measures it).
@Suite("Baselines larger than a batch and a read window")
struct BaselineStreamingTests {
    /// A device holding `count` notes with long titles (and one of `hugeTitle` bytes, when
    /// given), compacted into a baseline. Returns the container and the baseline's file.
    static func compactedDevice(
        notes count: Int,
        hugeTitle: Int? = nil
    ) throws -> (CompactionTests.SharedContainer, URL) {
        let shared = CompactionTests.SharedContainer()
        try shared.addDevice("alpha")
        let alpha = shared.devices[0]
        for start in stride(from: 0, to: count, by: 500) {
            shared.time.advance(by: 5)
            let context = ObjectContext(coordinator: alpha.coordinator)
            for index in start..<min(start + 500, count) {
                try context.insert(
                    entity: "Note",
                    values: [
                        "title": .string("note \(index) " + String(repeating: "x", count: 400)),
                        "rank": .integer(Int64(index)),
                    ]
                )
            }
            try context.save()
            try alpha.sync.exportPending()
        }
        if let hugeTitle {
            let context = ObjectContext(coordinator: alpha.coordinator)
            try context.insert(entity: "Note", values: ["title": .string(String(repeating: "h", count: hugeTitle))])
            try context.save()
            try alpha.sync.exportPending()
        }
        // Tombstones travel in the baseline too.
        let context = ObjectContext(coordinator: alpha.coordinator)
        let first = try #require(try context.fetch(FetchRequest(entity: "Note")).first)
        try context.delete(first.id)
        try context.save()
        try alpha.sync.publishAcknowledgement()
        #expect(try alpha.sync.compact() > 0)
        let folder = ContainerLayout(container: shared.container, storeName: "notes").deviceFolder("alpha")
        let name = try #require(
            try FileManager.default.contentsOfDirectory(atPath: folder.path).first { $0.hasPrefix("baseline-") }
        )
        return (shared, folder.appendingPathComponent(name))
    }

    @Test(
        "A baseline of thousands of records, one larger than the read window among them, is written from a spool and started from batch by batch, and reads as the whole-file decoder reads it"
    )
    func largeBaselineRoundTrips() throws {
        let (shared, url) = try Self.compactedDevice(notes: 2_500, hugeTitle: 3 << 20)
        let size = try #require(try FileManager.default.attributesOfItem(atPath: url.path)[.size] as? Int)
        #expect(size > 4 << 20, "more than a few read windows: \(size) bytes")

        // The file is what the whole-file encoder would have written: the decoder that reads it
        // whole (the doctor's, older versions') finds every change.
        let whole = try BaselinePayload.decode(from: try LogFile.decode(try Data(contentsOf: url), url: url))
        let streamed = try BaselineFile(url) { _ in nil }
        var read: [SyncChange] = []
        try streamed.forEachBatch(of: 700) { read += $0 }
        #expect(read == whole.changes)
        #expect(streamed.covers == whole.covers && streamed.changeCount == 2_501)  // 2,500 live notes and a deletion
        #expect(whole.changes.contains { $0.deleted != nil })

        // A new device starts from it and holds what the first one holds.
        let newcomer = try shared.addDevice("beta")
        #expect(try shared.devices[newcomer].sync.startFromBaseline() == 2_501)
        #expect(try shared.contents(newcomer) == shared.contents(0))
        #expect(try shared.contents(0).count == 2_500)
    }

    @Test("A baseline damaged anywhere is refused before any of it is applied")
    func damagedBaselineIsRefused() throws {
        let (shared, url) = try Self.compactedDevice(notes: 2_500)
        var bytes = try Data(contentsOf: url)
        bytes[bytes.count * 2 / 3] ^= 0x5A  // in the changes of the last batch
        try bytes.write(to: url)
        let newcomer = try shared.addDevice("beta")
        #expect(try shared.devices[newcomer].sync.startFromBaseline() == 0)
        #expect(try shared.contents(newcomer).isEmpty)
        #expect(throws: SyncError.self) { try BaselineFile(url) { _ in nil } }
    }
}
