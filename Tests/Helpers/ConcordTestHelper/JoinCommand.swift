import FolderSync
import Foundation
import Persistence
import SQLiteStore

// join-rss COUNT DIR: builds an SQLite store of COUNT items (in groups of 100, so relationships
// are exported too) in DIR without sync, turns sync on with a container in DIR, resets the
// process's peak resident set and joins the existing data to sync. Prints "joined EXPORTED LOGS"
// and then "rss BEFORE PEAK" in KiB: the resident set when the join started and its peak during
// the join. The memory test compares these across record counts.
#if canImport(Glibc)
import Glibc
#endif

func joinSchema() throws -> Schema {
    try Schema(
        version: 1,
        entities: [
            EntityDescription(
                "Group",
                attributes: [AttributeDescription("name", .string)],
                relationships: [RelationshipDescription("items", to: "Item", inverse: "group", isToMany: true)]
            ),
            EntityDescription(
                "Item",
                attributes: [
                    AttributeDescription("name", .string),
                    AttributeDescription("count", .integer),
                    AttributeDescription("weight", .double),
                    AttributeDescription("created", .date),
                    AttributeDescription("done", .boolean),
                ],
                relationships: [RelationshipDescription("group", to: "Group", inverse: "items")]
            ),
        ]
    )
}

func runJoinRSS(_ arguments: [String]) {
    guard arguments.count == 3, let count = Int(arguments[1]) else { fail("usage: join-rss COUNT DIR") }
    let directory = URL(fileURLWithPath: arguments[2])
    do {
        let schema = try joinSchema()
        let url = directory.appendingPathComponent("existing.sqlite")
        // The data an app kept before it synced.
        let plain = try SQLiteStore(url: url, schema: schema, options: StoreOptions(presentsFiles: false))
        var made = 0
        while made < count {
            var changes = StoreChanges()
            var group = Record(id: .random(entity: "Group"))
            for index in made..<min(made + 5000, count) {
                if index % 100 == 0 {
                    if !(group.toMany["items"] ?? []).isEmpty { changes.inserts.append(group) }
                    group = Record(id: .random(entity: "Group"), values: ["name": .string("group \(index / 100)")])
                }
                let item = Record(
                    id: .random(entity: "Item"),
                    values: [
                        "name": .string("item \(index) " + String(repeating: "x", count: index % 50)),
                        "count": .integer(Int64(index)),
                        "weight": .double(Double(index) / 7),
                        "created": .date(Date(timeIntervalSinceReferenceDate: Double(index))),
                        "done": .boolean(index % 2 == 0),
                    ],
                    toOne: ["group": group.id]
                )
                group.toMany["items", default: []].insert(item.id)
                changes.inserts.append(item)
            }
            if !(group.toMany["items"] ?? []).isEmpty { changes.inserts.append(group) }
            made += changes.inserts.count(where: { $0.id.entity == "Item" })
            try plain.commit(changes)
        }
        plain.close()

        // Sync is turned on.
        let registry = StoreRegistry()
        registry.register(SQLiteStore.self)
        let coordinator = StoreCoordinator(schema: schema, registry: registry)
        let store = try coordinator.addStore(ofType: "sqlite", at: url, options: StoreOptions(presentsFiles: false))
        let container = directory.appendingPathComponent("container")
        try FileManager.default.createDirectory(at: container, withIntermediateDirectories: true)
        let sync = try FolderSync(
            coordinator: coordinator,
            store: store,
            container: container,
            storeName: "items",
            deviceID: "joiner"
        )
        resetPeakResidentSet()  // VmHWM now tracks the join alone
        let before = statusKiB("VmRSS")
        let exported = try sync.exportExistingData()
        let peak = statusKiB("VmHWM")
        let logs = try FileManager.default.contentsOfDirectory(atPath: sync.layout.deviceFolder("joiner").path)
            .count(where: { $0.hasSuffix(".cclog") })
        say("joined \(exported) \(logs)")
        say("rss \(before) \(peak)")
        sync.stop()
    } catch {
        fail("join-rss failed: \(error)")
    }
}
