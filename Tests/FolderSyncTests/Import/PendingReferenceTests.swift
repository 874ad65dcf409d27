import ConcordTestSupport
import FolderSync
import Foundation
import Persistence
import SyncTestKit
import Testing

/// "Not arrived" is not "deleted": a reference to a record nobody deleted waits (bounded) before
/// repair policies see it, and the built-in repairs act only on deleted targets.
@Suite("Pending references")
struct PendingReferenceTests {
    /// A format-2 log (as an older device writes: no dependencies) of `device` numbered `sequence`
    /// holding `changes`.
    static func legacyLog(_ device: String, _ sequence: UInt64, _ changes: [SyncChange]) throws -> LogFile {
        LogFile(
            device: device,
            sequence: sequence,
            schemaVersion: SyncSimulator.schema.version,
            created: Date(),
            payload: try SyncPayload(changes: changes).encoded(formatVersion: 2),
            formatVersion: 2
        )
    }

    static func creation(
        _ id: ObjectID,
        at time: UInt64,
        values: [String: Value],
        folder: ObjectID? = nil
    ) -> SyncChange {
        var change = SyncChange(id: id)
        let clock = SyncClock(time: time, counter: 0, device: "old")
        change.created = clock
        for (key, value) in values { change.values[key] = ClockedValue(value: value, clock: clock) }
        if id.entity == "Note" { change.references["folder"] = ClockedReference(target: folder, clock: clock) }
        return change
    }

    /// A note's attributes, as a creation carries them all.
    static func note(_ title: String) -> [String: Value] {
        ["title": .string(title), "rank": .integer(0), "pinned": .boolean(false)]
    }

    static func bench() throws -> SyncTestBench {
        let bench = SyncTestBench()
        let beta = try bench.addDevice("beta")
        beta.coordinator.policies.register(ClearMissingReferences("Note"))
        return bench
    }

    @Test("a note whose folder has not arrived keeps it through local saves, and lands in it when it comes")
    func notArrivedWaits() throws {
        let bench = try Self.bench()
        let folder = ObjectID(entity: "Folder", uuid: UUID())
        let note = ObjectID(entity: "Note", uuid: UUID())
        // Two devices of an older version, whose logs carry no dependencies: one makes the folder,
        // the other files a note into it; the note's log arrives first.
        let folderLog = try Self.legacyLog(
            "old",
            1,
            [Self.creation(folder, at: 1_000, values: ["name": .string("Work")])]
        )
        let noteLog = try Self.legacyLog(
            "other",
            1,
            [Self.creation(note, at: 2_000, values: Self.note("filed"), folder: folder)]
        )
        try bench.place(noteLog.encoded(), name: ContainerLayout.logFileName(sequence: 1), author: "other", in: "beta")
        #expect(try bench.importOn("beta").logs == 1)

        let coordinator = bench["beta"].coordinator
        let waiting = NotificationRecorder(.concordReferencesAwaitingTargets) {
            ($0.object as? ObjectContext)?.coordinator === coordinator
        }
        try bench.addNote("beta", "a local save validates what the import left")
        #expect(
            try bench["beta"].store.records(with: [note]).first?.toOne["folder"] == folder,
            "not repaired: the folder may come"
        )
        #expect(waiting.count == 1, "announced once")
        try bench.addNote("beta", "another save")
        #expect(waiting.count == 1)

        try bench.place(folderLog.encoded(), name: ContainerLayout.logFileName(sequence: 1), author: "old", in: "beta")
        #expect(try bench.importOn("beta").logs == 1)
        try bench.addNote("beta", "after the folder came")
        let filed = try #require(try bench["beta"].store.records(with: [note]).first)
        #expect(filed.toOne["folder"] == folder)
    }

    @Test(
        "a reference to a deleted record is repaired at once; one that never arrives reaches repair policies after the timeout, marked not arrived"
    )
    func deletedIsRepairedAndTimeoutReachesPolicies() throws {
        let bench = try Self.bench()
        try bench.addDevice("alpha")
        bench["beta"].coordinator.policies.pendingReferenceTimeout = .zero
        let seen = SeenViolations()
        bench["beta"].coordinator.policies.register(RecordingRepair(seen: seen))
        let ghost = ObjectID(entity: "Folder", uuid: UUID())
        let note = ObjectID(entity: "Note", uuid: UUID())
        try bench.place(
            try Self.legacyLog("other", 1, [Self.creation(note, at: 2_000, values: Self.note("lost"), folder: ghost)])
                .encoded(),
            name: ContainerLayout.logFileName(sequence: 1),
            author: "other",
            in: "beta"
        )
        try bench.importOn("beta")
        try bench.addNote("beta", "validate")
        #expect(seen.states == [.notArrived], "the policy saw it, marked as not arrived")
        // The built-in repair leaves it; the save did not fail.
        #expect(try bench["beta"].store.records(with: [note]).first?.toOne["folder"] == ghost)

        // A folder deleted on alpha while beta filed a note into it: repaired at beta's next save.
        let work = try #require(
            try bench.edit("alpha") { context in
                _ = try context.insert(entity: "Folder", values: ["name": .string("Work")])
            }.first?.id
        )
        try bench.deliver("alpha", [1], to: "beta")
        try bench.importOn("beta")
        let filed = try #require(
            try bench.edit("beta") { context in
                var record = try context.insert(entity: "Note", values: ["title": .string("into work")])
                record.toOne["folder"] = work
                try context.update(record)
            }.first?.id
        )
        try bench.edit("alpha") { context in try context.delete(work) }
        try bench.deliver("alpha", [2], to: "beta")
        try bench.importOn("beta")
        try bench.addNote("beta", "validate again")
        #expect(seen.states.contains(.deleted))
        #expect(
            try bench["beta"].store.records(with: [filed]).first?.toOne["folder"] == nil,
            "the deleted folder's reference was cleared"
        )
    }
}

/// The target states a repair policy was shown, in order.
final class SeenViolations: @unchecked Sendable {
    private let lock = NSLock()
    private var recorded: [MissingTargetState] = []
    var states: [MissingTargetState] { lock.withLock { recorded } }
    func add(_ state: MissingTargetState) { lock.withLock { recorded.append(state) } }
}

/// Records what it sees, then does what the built-in repair does.
struct RecordingRepair: ValidationRepairPolicy {
    let entityName = "Note"
    let seen: SeenViolations
    func repair(_ record: Record, violations: [ValidationViolation], in context: ObjectContext) throws -> Bool {
        for violation in violations where violation.rule == .missingDestination {
            seen.add(violation.targetState ?? .deleted)
        }
        return try ClearMissingReferences("Note").repair(record, violations: violations, in: context)
    }
}

/// Counts the notifications of one name.
final class NotificationRecorder: @unchecked Sendable {
    private let lock = NSLock()
    private var seen = 0
    private var token: (any NSObjectProtocol)?
    init(_ name: Notification.Name, where accept: @escaping @Sendable (Notification) -> Bool) {
        token = NotificationCenter.default.addObserver(forName: name, object: nil, queue: nil) { [weak self] note in
            guard let self, accept(note) else { return }
            self.lock.withLock { self.seen += 1 }
        }
    }
    deinit { if let token { NotificationCenter.default.removeObserver(token) } }
    var count: Int { lock.withLock { seen } }
}
