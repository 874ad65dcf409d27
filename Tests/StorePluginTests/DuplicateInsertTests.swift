// A local insert never replaces a record silently, whatever the store type: before, every plugin
// committed an insert as an upsert (SQLite's INSERT OR REPLACE, a whole-file store's dictionary),
// so an id made twice (a failed random source) overwrote an acknowledged record.
import ConcordTestSupport
import Foundation
import JSONStore
import Persistence
import PlistStore
import SQLiteStore
import StoreConformance
import Testing

@Suite("Duplicate inserts")
struct DuplicateInsertTests {
    static let types: [any PersistentStore.Type] = [SQLiteStore.self, JSONStore.self, PlistStore.self]

    let directory = TemporaryDirectory("duplicate-insert")

    /// A coordinator with one store of `type`.
    func coordinator(_ type: any PersistentStore.Type) throws -> (StoreCoordinator, any PersistentStore) {
        let registry = StoreRegistry()
        registry.register(type)
        let coordinator = StoreCoordinator(schema: ConformanceSchema.v1, registry: registry)
        let store = try coordinator.addStore(
            ofType: type.storeType,
            at: directory("items.\(type.storeType)"),
            options: StoreOptions(presentsFiles: false)
        )
        return (coordinator, store)
    }

    static let id = ObjectID.deterministic(entity: "Item", name: "the one")

    static func item(_ title: String) -> Record { Record(id: id, values: ["title": .string(title)]) }

    static func title(in store: any PersistentStore) throws -> Value? {
        try store.records(with: [id]).first?["title"]
    }

    /// `body` must throw `invalidRequest` with reason `duplicateID`, naming the id and the store.
    static func expectDuplicate(
        _ store: any PersistentStore,
        sourceLocation: SourceLocation = #_sourceLocation,
        _ body: () throws -> Void
    ) {
        do {
            try body()
            Issue.record("no error: the insert replaced the record", sourceLocation: sourceLocation)
        } catch let error as PersistenceError {
            #expect(
                error.code == .invalidRequest && error.reason == .duplicateID,
                "\(error)",
                sourceLocation: sourceLocation
            )
            #expect(error.url == store.url, "names the store: \(error)", sourceLocation: sourceLocation)
            #expect(error.message.contains("\(id)"), "names the record: \(error)", sourceLocation: sourceLocation)
        } catch {
            Issue.record("unexpected \(error)", sourceLocation: sourceLocation)
        }
    }

    @Test(
        "inserting an id the store holds throws duplicateID, for every store type; the saved record stays",
        arguments: types
    )
    func insertOfHeldID(_ type: any PersistentStore.Type) throws {
        let (coordinator, store) = try coordinator(type)
        defer { coordinator.removeStore(store) }
        let first = ObjectContext(coordinator: coordinator, name: "first")
        try first.insert(Self.item("acknowledged"))
        try first.save()

        let second = ObjectContext(coordinator: coordinator, name: "second")
        Self.expectDuplicate(store) { try second.insert(Self.item("overwrite")) }
        #expect(!second.hasChanges)
        #expect(try Self.title(in: store) == .string("acknowledged"))
        // In one context, too: a second insert of an id it inserted is no replacement either.
        let third = ObjectContext(coordinator: coordinator, name: "third")
        let other = Record(id: .deterministic(entity: "Item", name: "other"), values: ["title": .string("a")])
        try third.insert(other)
        #expect(throws: PersistenceError.self) { try third.insert(other) }
    }

    @Test("another context saving the same id first: the later save fails, nothing of it is written", arguments: types)
    func raceCaughtAtSave(_ type: any PersistentStore.Type) throws {
        let (coordinator, store) = try coordinator(type)
        defer { coordinator.removeStore(store) }
        let slow = ObjectContext(coordinator: coordinator, name: "slow")
        try slow.insert(Self.item("slow"))
        try slow.insert(Record(id: .deterministic(entity: "Item", name: "beside"), values: ["title": .string("b")]))
        let fast = ObjectContext(coordinator: coordinator, name: "fast")
        try fast.insert(Self.item("fast"))
        try fast.save()

        Self.expectDuplicate(store) { try slow.save() }
        #expect(slow.hasChanges, "the context keeps its changes")
        #expect(try Self.title(in: store) == .string("fast"))
        #expect(try store.count(for: FetchRequest(entity: "Item")) == 1, "the save committed nothing")
    }

    @Test("a record deleted and inserted anew in one context is replaced, on purpose", arguments: types)
    func deleteThenInsertReplaces(_ type: any PersistentStore.Type) throws {
        let (coordinator, store) = try coordinator(type)
        defer { coordinator.removeStore(store) }
        let first = ObjectContext(coordinator: coordinator, name: "first")
        try first.insert(Self.item("old"))
        try first.save()
        let context = ObjectContext(coordinator: coordinator, name: "replace")
        try context.delete(Self.id)
        try context.insert(Self.item("new"))
        try context.save()
        #expect(try Self.title(in: store) == .string("new"))
    }

    @Test("an import context applies another device's record over the one held (what sync relies on)", arguments: types)
    func importReplaces(_ type: any PersistentStore.Type) throws {
        let (coordinator, store) = try coordinator(type)
        defer { coordinator.removeStore(store) }
        let first = ObjectContext(coordinator: coordinator, name: "first")
        try first.insert(Self.item("local"))
        try first.save()
        let imported = ObjectContext(coordinator: coordinator, origin: .import, name: "import")
        try imported.insert(Self.item("imported"))
        try imported.save()
        #expect(try Self.title(in: store) == .string("imported"))
    }
}
