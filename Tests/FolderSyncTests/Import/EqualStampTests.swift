import FolderSync
import Foundation
import Persistence
import SyncTestKit
import Testing

/// Two copies of one store (a cloned machine) start from one stored clock and can stamp two
/// different writes with one timestamp. Every device must keep the same one, whichever it met
/// first.
@Suite("Equal stamps")
struct EqualStampTests {
    let note = ObjectID(entity: "Note", uuid: UUID())
    let folders = [ObjectID(entity: "Folder", uuid: UUID()), ObjectID(entity: "Folder", uuid: UUID())]
    let tag = ObjectID(entity: "Tag", uuid: UUID())

    func log(_ sequence: UInt64, _ changes: [SyncChange]) throws -> Data {
        try LogFile(
            device: "alpha",
            sequence: sequence,
            schemaVersion: SyncSimulator.schema.version,
            created: Date(),
            payload: SyncPayload(changes: changes).encoded()
        ).encoded()
    }

    /// Log 1: the note, two folders and a tag. Log 2, as each copy wrote it: the same stamp on
    /// every write, different values (the note's title, rank and folder; the tag added by one
    /// copy and taken away by the other).
    func logs() throws -> (first: Data, copies: [Data]) {
        let created = SyncClock(time: 1_000, counter: 0, device: "alpha")
        func creation(_ id: ObjectID, _ values: [String: Value]) -> SyncChange {
            var change = SyncChange(id: id)
            change.created = created
            change.values = values.mapValues { ClockedValue(value: $0, clock: created) }
            return change
        }
        let first = try log(
            1,
            [
                creation(note, ["title": .string("start"), "rank": .integer(0), "pinned": .boolean(false)]),
                creation(folders[0], ["name": .string("one")]),
                creation(folders[1], ["name": .string("two")]),
                creation(tag, ["label": .string("tag")]),
            ]
        )
        let stamp = SyncClock(time: 2_000, counter: 3, device: "alpha")
        let copies = try [("copy A", 1, folders[0], true), ("copy B", 2, folders[1], false)].map {
            title,
            rank,
            folder,
            tagged in
            var change = SyncChange(id: note)
            change.values["title"] = ClockedValue(value: .string(title), clock: stamp)
            change.values["rank"] = ClockedValue(value: .integer(Int64(rank)), clock: stamp)
            change.references["folder"] = ClockedReference(target: folder, clock: stamp)
            change.members["tags"] = [ClockedMember(target: tag, present: tagged, clock: stamp)]
            return try log(2, [change])
        }
        return (first, copies)
    }

    @Test("Two writes with one stamp and different values end the same on every device, whichever arrives first")
    func devicesAgreeWhicheverArrivesFirst() throws {
        let bench = SyncTestBench()
        try bench.addDevice("beta")
        try bench.addDevice("gamma")
        let (first, copies) = try logs()
        let conflictName = "0000000000000002.sync-conflict-20261201-101010-ABCDEFG.cclog"
        for (viewer, order) in [("beta", [0, 1]), ("gamma", [1, 0])] {
            try bench.place(first, name: ContainerLayout.logFileName(sequence: 1), author: "alpha", in: viewer)
            try bench.place(
                copies[order[0]],
                name: ContainerLayout.logFileName(sequence: 2),
                author: "alpha",
                in: viewer
            )
            #expect(try bench.importOn(viewer).logs == 2)
            try bench.place(copies[order[1]], name: conflictName, author: "alpha", in: viewer)
            #expect(try bench.importOn(viewer).logs == 1)
        }
        let beta = try bench.contents("beta")
        #expect(beta == (try bench.contents("gamma")))
        let kept = try #require(beta.first { $0.id == note })
        // The greater value wins each tie; a removal wins over an addition.
        #expect(kept["title"] == .string("copy B"))
        #expect(kept["rank"] == .integer(2))
        #expect(kept.toOne["folder"] == folders.max { $0.description < $1.description })
        #expect(kept.toMany["tags"] == nil)
    }
}
