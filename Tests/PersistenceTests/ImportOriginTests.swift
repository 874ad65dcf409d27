import Foundation
import Persistence
import Synchronization
import Testing

@Suite("Import origin")
struct ImportOriginTests {
    static let schema = try! Schema(
        version: 1,
        entities: [
            EntityDescription("Note", attributes: [AttributeDescription("title", .string)]),
            EntityDescription("History", attributes: [AttributeDescription("entry", .string)]),
        ]
    )

    final class Log: Sendable {
        let origins = Mutex<[ChangeOrigin]>([])
    }

    /// Plain values in `didInsert`; side effects (a history record per new note) in the
    /// separate `didChangeLocally` hook, which imports never call.
    struct NoteHooks: EntityHooks {
        let entityName = "Note"
        let log = Log()
        func didInsert(_ record: inout Record, origin: ChangeOrigin, context: ObjectContext) throws {
            log.origins.withLock { $0.append(origin) }
        }
        func didChangeLocally(_ record: Record, change: RecordChangeKind, context: ObjectContext) throws {
            try context.insert(entity: "History", values: ["entry": .string("\(change) \(record["title"])")])
        }
    }

    @Test("A side-effect hook runs for local edits and not for imports; every hook and change set carries the origin")
    func sideEffectsAreLocalOnly() throws {
        let device = try Device("one", schema: Self.schema)
        let hooks = NoteHooks()
        let local = ObjectContext(coordinator: device.coordinator, origin: .local, hooks: [hooks])
        try local.insert(entity: "Note", values: ["title": "mine"])
        let localChanges = try local.save()
        #expect(localChanges.origin == .local)
        #expect(localChanges.inserted.filter { $0.id.entity == "History" }.count == 1)

        let importer = ObjectContext(coordinator: device.coordinator, origin: .import, hooks: [hooks])
        let theirs = try importer.insert(entity: "Note", values: ["title": "theirs"])
        var edited = theirs
        edited["title"] = "theirs, edited"
        try importer.update(edited)
        let importChanges = try importer.save()
        #expect(importChanges.origin == .import)
        #expect(importChanges.inserted.map(\.id) == [theirs.id])

        #expect(hooks.log.origins.withLock { $0 } == [.local, .import])
        let history = try device.store.fetch(FetchRequest(entity: "History")).map(\.values["entry"])
        #expect(history == [.string("insert \"mine\"")])
    }
}
