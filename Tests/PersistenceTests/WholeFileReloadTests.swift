import ConcordTestSupport
import Foundation
import Synchronization
import Testing

@testable import Persistence

/// A whole-file store's snapshot only ever moves forward.
@Suite("Whole-file store reloads")
struct WholeFileReloadTests {
    let directory = TemporaryDirectory("reload")

    static let schema = try! Schema(
        version: 1,
        entities: [EntityDescription("Item", attributes: [AttributeDescription("title", .string)])]
    )

    static func insert(_ title: String, into store: SnapshotStore) throws -> ObjectID {
        let id = ObjectID(entity: "Item", uuid: UUID())
        try store.commit(StoreChanges(inserts: [Record(id: id, values: ["title": .string(title)])]))
        return id
    }

    @Test("a reload that read the file before the store's own commit ended does not take the store back to it")
    func staleReloadIsNotInstalled() throws {
        let url = directory("store.json")
        let options = StoreOptions(presentsFiles: false)
        let mine = try SnapshotStore(url: url, schema: Self.schema, options: options)
        let other = try SnapshotStore(url: url, schema: Self.schema, options: options)
        // Another writer's commit: the store's snapshot is behind the file.
        let theirs = try Self.insert("theirs", into: other)
        // The store reloads what that commit left; before it installs it, the store commits.
        let own = Mutex<ObjectID?>(nil)
        mine.reloadWillInstall.withLock { hook in
            hook = {
                mine.reloadWillInstall.withLock { $0 = nil }
                own.withLock { $0 = try? Self.insert("mine", into: mine) }
            }
        }
        // (One reload, as the presenter queue runs it; refresh() would look again.)
        mine.reloadIfChanged()
        let ownID = try #require(own.withLock { $0 })
        #expect(try mine.records(with: [theirs, ownID]).count == 2, "the store holds both commits")
        #expect(try other.records(with: [ownID]).isEmpty, "(the other store has not looked yet)")
        try other.refresh()
        #expect(try other.records(with: [theirs, ownID]).count == 2)
    }
}
