import ConcordTestSupport
import Foundation
import Persistence
import SQLiteStore
import SyncTestKit
import Testing

@testable import FolderSync

/// The typed keys of sync's metadata keep the names and the bytes earlier versions wrote: a store
/// written by them reads the same through ``SyncMetadata``, and writes stay byte for byte.
@Suite("Sync metadata")
struct SyncMetadataTests {
    static let clock = SyncClock(time: 1_700_000_000_123, counter: 7, device: "alpha")

    /// Every key's name, as earlier versions of Concord wrote it.
    @Test("every key and prefix keeps its name")
    func names() {
        let names: [(String, String)] = [
            (SyncMetadata.device.name, "sync.device"),
            (SyncMetadata.renamedFrom.name, "sync.renamedFrom"),
            (SyncMetadata.renamedTo.name, "sync.renamedTo"),
            (SyncMetadata.deviceIDInUse.name, "sync.deviceIDInUse"),
            (SyncMetadata.sequence.name, "sync.out/seq"),
            (SyncMetadata.clock.name, "sync.out/clock"),
            (SyncMetadata.outbox.prefix, "sync.out."),
            (SyncMetadata.outboxFrom.name, "sync.outboxFrom"),
            (SyncMetadata.keptFrom.name, "sync.keptFrom"),
            (SyncMetadata.dependencies.name, "sync.deps"),
            (SyncMetadata.leapFrom.name, "sync.out/leapFrom"),
            (SyncMetadata.runFrom.name, "sync.out/runFrom"),
            (SyncMetadata.numberedRuns.name, "sync.out/numberedRuns"),
            (SyncMetadata.suspectFrom.name, "sync.out/suspectFrom"),
            (SyncMetadata.resendOwnWrites.name, "sync.out/resendOwnWrites"),
            (SyncMetadata.restoreThrough.name, "sync.restoreThrough"),
            (SyncMetadata.retiredOutbox.prefix, "sync.retiredOut."),
            (SyncMetadata.applied.prefix, "sync.applied."),
            (SyncMetadata.versionsApplied.prefix, "sync.versions."),
            (SyncMetadata.recordClocks.prefix, "sync.r."),
            (SyncMetadata.collectedThrough.name, "sync.collectedThrough"),
            (SyncMetadata.loser.prefix, "sync.loser."),
            (SyncMetadata.relinked.prefix, "sync.relinked."),
            (SyncMetadata.reconsider.prefix, "sync.reconsider."),
            (SyncMetadata.redirect.prefix, "sync.redirect."),
            (SyncMetadata.contributed.name, "sync.contributed"),
            (SyncMetadata.joining.name, "sync.joining"),
            (SyncMetadata.disabled.name, "sync.disabled"),
            (SyncMetadata.container.name, "sync.container"),
            (SyncMetadata.containerGone.name, "sync.containerGone"),
            (SyncMetadata.metContainers.name, "sync.containersMet"),
            (SyncMetadata.maintainedAt.name, "sync.maintainedAt"),
            (SyncMetadata.legacySequence.name, "sync.seq"),
            (SyncMetadata.legacyClock.name, "sync.clock"),
        ]
        for (name, legacy) in names { #expect(name == legacy && name.hasPrefix(SyncMetadata.namespace)) }
        #expect(
            SyncMetadata.renamed.map { [$0.old.name, $0.new.name] } == [
                ["sync.seq", "sync.out/seq"], ["sync.clock", "sync.out/clock"],
            ]
        )
    }

    @Test("the names of a family's entries, and what they say")
    func familyNames() throws {
        let winner = ObjectID(entity: "Note", uuid: UUID(uuidString: "00000000-0000-0000-0000-000000000001")!)
        let loser = ObjectID(entity: "Note", uuid: UUID(uuidString: "00000000-0000-0000-0000-000000000002")!)
        #expect(SyncMetadata.outboxLog(42).name == "sync.out.0000000000000042")
        #expect(SyncMetadata.outboxSequence(of: "sync.out.0000000000000042") == 42)
        #expect(SyncMetadata.outboxSequence(of: "sync.out/seq") == nil)
        #expect(SyncMetadata.retiredOutboxLog("beta", 7).name == "sync.retiredOut.beta.0000000000000007")
        let retired = try #require(SyncMetadata.retiredLog(named: "sync.retiredOut.be.ta.0000000000000007"))
        #expect(retired.device == "be.ta" && retired.sequence == 7)
        #expect(SyncMetadata.retiredLog(named: "sync.out.0000000000000007") == nil)
        #expect(SyncMetadata.recordClocks(winner).name == "sync.r." + winner.description)
        #expect(SyncMetadata.recordClocks.suffix(of: "sync.r." + winner.description) == Substring(winner.description))
        #expect(SyncMetadata.recordClocks.suffix(of: "sync.redirect.x") == nil)
        #expect(SyncMetadata.applied("beta").name == "sync.applied.beta")
        #expect(SyncMetadata.versionsApplied("beta").name == "sync.versions.beta")
        #expect(SyncMetadata.redirect(loser).name == "sync.redirect." + loser.description)
        #expect(SyncMetadata.reconsider(winner).name == "sync.reconsider." + winner.description)
        let mark = SyncMetadata.loser(winner: winner, loser: loser).name
        #expect(mark == "sync.loser.\(winner)|\(loser)")
        #expect(SyncMetadata.losers(favouring: winner).prefix == "sync.loser.\(winner)|")
        #expect(SyncMetadata.lastRecord(of: mark) == Substring(loser.description))
        #expect(SyncMetadata.relinked(target: winner, record: loser).name == "sync.relinked.\(winner)|\(loser)")
        #expect(SyncMetadata.relinks(of: winner).prefix == "sync.relinked.\(winner)|")
    }

    @Test("each codec writes what earlier versions wrote, and reads it back")
    func codecsKeepTheLegacyBytes() throws {
        // Decimal numbers as UTF-8 text.
        #expect(try SyncMetadata.sequence.encode(1234) == Data("1234".utf8))
        #expect(SyncMetadata.sequence.decode(Data("1234".utf8)) == 1234)
        #expect(SyncMetadata.sequence.decode(Data("twelve".utf8)) == nil)
        #expect(try SyncMetadata.maintainedAt.encode(1_700_000_000.25) == Data(String(1_700_000_000.25).utf8))
        #expect(SyncMetadata.maintainedAt.decode(Data("1700000000.25".utf8)) == 1_700_000_000.25)
        // UTF-8 text (read leniently, as `String(decoding:as:)`).
        #expect(try SyncMetadata.device.encode("alpha-é") == Data("alpha-é".utf8))
        #expect(SyncMetadata.device.decode(Data("alpha-é".utf8)) == "alpha-é")
        #expect(SyncMetadata.device.decode(Data([0x61, 0xFF])) == String(decoding: Data([0x61, 0xFF]), as: UTF8.self))
        // JSON as `JSONEncoder` writes it: the clock (also as the hand-made JSON of a save), the
        // applied logs, and the sorted dependencies and versions.
        // (`JSONEncoder` does not promise an order of keys: what earlier versions wrote is read
        // back, whichever order it has.)
        let clock = try SyncMetadata.clock.encode(Self.clock)
        #expect(SyncMetadata.clock.decode(clock) == Self.clock)
        #expect(SyncMetadata.clock.decode(try JSONEncoder().encode(Self.clock)) == Self.clock)
        #expect(SyncMetadata.clock.decode(try Self.clock.jsonData()) == Self.clock)
        #expect(SyncMetadata.collectedThrough.decode(clock) == Self.clock)
        #expect(SyncMetadata.clock.decode(Data("{".utf8)) == nil)
        let applied = AppliedLogs(through: 5, extra: [7, 9])
        #expect(
            (try? JSONDecoder().decode(AppliedLogs.self, from: SyncMetadata.applied("beta").encode(applied)))
                == applied
        )
        #expect(SyncMetadata.applied("beta").decode(try JSONEncoder().encode(applied)) == applied)
        let dependencies: [String: UInt64] = ["gamma": 3, "beta": 12, "alpha": 1]
        #expect(try SyncMetadata.dependencies.encode(dependencies) == Data(#"{"alpha":1,"beta":12,"gamma":3}"#.utf8))
        #expect(SyncMetadata.dependencies.decode(Data(#"{"beta":12}"#.utf8)) == ["beta": 12])
        var versions = LogVersions(voids: [10...20], historyThrough: 4)
        versions.noteApplied(3, digest: 99)
        let sorted = JSONEncoder()
        sorted.outputFormatting = [.sortedKeys]
        #expect(try SyncMetadata.versionsApplied("beta").encode(versions) == (try sorted.encode(versions)))
        #expect(SyncMetadata.versionsApplied("beta").decode(try sorted.encode(versions)) == versions)
        #expect(try SyncMetadata.numberedRuns.encode([[1, 4], [9, 12]]) == Data("[[1,4],[9,12]]".utf8))
        // Lines, joined as a join records the container's ids.
        #expect(try SyncMetadata.container.encode(["b-id", "a-id"]) == Data("b-id\na-id".utf8))
        #expect(SyncMetadata.container.decode(Data("a-id\n\nb-id\n".utf8)) == ["a-id", "b-id"])
        #expect(SyncMetadata.metContainers.decode(Data()) == [])
        // Marks: "1", or empty for the duplicates' notes; present whatever they hold.
        #expect(try SyncMetadata.disabled.encode(()) == Data("1".utf8))
        #expect(try SyncMetadata.reconsider("Note/x").encode(()) == Data())
        #expect(SyncMetadata.contributed.decode(Data("anything".utf8)) != nil)
        // A join's choice by its raw value.
        #expect(try SyncMetadata.joining.encode(.mergeLocalIntoContainer) == Data("mergeLocalIntoContainer".utf8))
        #expect(SyncMetadata.joining.decode(Data("mergeLocalIntoContainer".utf8)) == .mergeLocalIntoContainer)
        #expect(SyncMetadata.joining.decode(Data("nonsense".utf8)) == nil)
        // Record clocks: binary, and JSON as earlier versions kept them.
        var clocks = RecordClocks(created: Self.clock)
        clocks.deleted = SyncClock(time: Self.clock.time + 1, counter: 0, device: "beta")
        let id = ObjectID.random(entity: "Note")
        #expect(try SyncMetadata.recordClocks(id).encode(clocks) == clocks.encoded())
        #expect(SyncMetadata.recordClocks(id).decode(clocks.encoded()) == clocks)
        #expect(SyncMetadata.recordClocks(id).decode(try JSONEncoder().encode(clocks)) == clocks)
        #expect(SyncMetadata.recordClocks(id).decode(Data([0xC3, 1])) == nil)
        // Bytes as they are.
        #expect(try SyncMetadata.outboxLog(1).encode(Data([0, 1, 2])) == Data([0, 1, 2]))
    }

    @Test("changes made through the keys are the entries earlier versions committed")
    func changesKeepTheLegacyEntries() throws {
        var changes = SyncMetadataChanges()
        try changes.set(SyncMetadata.sequence, 5)
        try changes.set(SyncMetadata.outboxLog(5), Data([1, 2]))
        changes.mark(SyncMetadata.disabled)
        changes.remove(SyncMetadata.leapFrom)
        changes.remove(named: "sync.r.Note/x")
        let expected: [String: Data?] = [
            "sync.out/seq": Data("5".utf8), "sync.out.0000000000000005": Data([1, 2]),
            "sync.disabled": Data("1".utf8), "sync.out/leapFrom": nil, "sync.r.Note/x": nil,
        ]
        #expect(changes.metadataEntries == expected)
        #expect(changes.written(SyncMetadata.sequence) == .some(5))
        #expect(changes.written(SyncMetadata.leapFrom) == .some(nil))
        #expect(changes.written(SyncMetadata.keptFrom) == nil)
        var store = StoreChanges()
        try store.set(SyncMetadata.keptFrom, 3)
        store.merge(changes)
        #expect(store.metadataEntries.count == 6 && store.metadataEntries["sync.keptFrom"] == Data("3".utf8))
        #expect(StoreChanges(syncMetadata: changes).metadataEntries == changes.metadataEntries)
    }

    @Test("a store written the way earlier versions wrote it reads back through the keys")
    func legacyStoreReadsThroughTheKeys() throws {
        let directory = TemporaryDirectory("sync-metadata")
        let registry = StoreRegistry()
        registry.register(SQLiteStore.self)
        let coordinator = StoreCoordinator(schema: SyncSimulator.schema, registry: registry)
        let store = try coordinator.addStore(
            ofType: "sqlite",
            at: directory("notes.sqlite"),
            options: StoreOptions(presentsFiles: false)
        )
        defer { store.close() }
        let id = ObjectID.random(entity: "Note")
        let clocks = RecordClocks(created: Self.clock)
        try store.commit(
            StoreChanges(metadataEntries: [
                "sync.device": Data("alpha".utf8),
                "sync.out/seq": Data("17".utf8),
                "sync.out/clock": try JSONEncoder().encode(Self.clock),
                "sync.deps": Data(#"{"beta":4}"#.utf8),
                "sync.applied.beta": Data(#"{"through":4,"extra":[6]}"#.utf8),
                "sync.applied.gamma": Data(#"{"through":2,"extra":[]}"#.utf8),
                "sync.container": Data("id-2\nid-1".utf8),
                "sync.contributed": Data("1".utf8),
                "sync.out.0000000000000017": Data([9, 9]),
                "sync.r." + id.description: clocks.encoded(),
            ])
        )
        let read = try store.syncMetadata([
            SyncMetadata.device, SyncMetadata.sequence, SyncMetadata.clock, SyncMetadata.dependencies,
            SyncMetadata.container, SyncMetadata.contributed, SyncMetadata.disabled, SyncMetadata.outboxLog(17),
            SyncMetadata.recordClocks(id),
        ])
        #expect(read[SyncMetadata.device] == "alpha")
        #expect(read[SyncMetadata.sequence] == 17)
        #expect(read[SyncMetadata.clock] == Self.clock)
        #expect(read[SyncMetadata.dependencies] == ["beta": 4])
        #expect(read[SyncMetadata.container] == ["id-2", "id-1"])
        #expect(read.contains(SyncMetadata.contributed) && !read.contains(SyncMetadata.disabled))
        #expect(read[SyncMetadata.outboxLog(17)] == Data([9, 9]))
        #expect(read[SyncMetadata.recordClocks(id)] == clocks)
        #expect(read.bytes(SyncMetadata.sequence) == Data("17".utf8))
        #expect(try store.syncMetadataValue(SyncMetadata.keptFrom) == nil)
        #expect(try store.hasSyncMetadata(SyncMetadata.contributed))
        #expect(try store.hasSyncMetadata(in: SyncMetadata.outbox))
        #expect(try !store.hasSyncMetadata(in: SyncMetadata.retiredOutbox))
        var applied: [String: AppliedLogs] = [:]
        try store.enumerateSyncMetadata(in: SyncMetadata.applied, batchSize: 1) { batch in
            for entry in batch { applied[String(entry.suffix)] = entry.value }
        }
        #expect(applied == ["beta": .init(through: 4, extra: [6]), "gamma": .init(through: 2)])
        #expect(try store.syncMetadata(in: SyncMetadata.outbox, limit: 1).map(\.name) == ["sync.out.0000000000000017"])
        // Written through the keys, read back raw: the same bytes.
        var changes = SyncMetadataChanges()
        try changes.set(SyncMetadata.sequence, 18)
        try changes.set(SyncMetadata.applied("beta"), AppliedLogs(through: 6))
        changes.remove(SyncMetadata.contributed)
        try store.commit(StoreChanges(syncMetadata: changes))
        let raw = try store.metadataEntries(forKeys: ["sync.out/seq", "sync.applied.beta", "sync.contributed"])
        #expect(raw["sync.out/seq"] == Data("18".utf8))
        // (JSON as `JSONEncoder` writes it, in whichever order of keys it has.)
        #expect(
            raw["sync.applied.beta"].flatMap { try? JSONDecoder().decode(AppliedLogs.self, from: $0) }
                == AppliedLogs(through: 6)
        )
        #expect(raw["sync.contributed"] == nil)
    }
}
