import Foundation
import Persistence
import SQLiteStore

// migrate-rss COUNT DIR: builds an SQLite store of COUNT records in DIR (in batches), then
// resets the process's peak resident set and migrates the store to a new SQLite store in the same
// directory. Prints "rss BEFORE PEAK" in KiB: the resident set when the migration started and its
// peak during the migration. The memory test compares these across record counts.
#if canImport(Glibc)
import Glibc
#endif

func migrationSchema() throws -> Schema {
    try Schema(
        version: 1,
        entities: [
            EntityDescription(
                "Item",
                attributes: [
                    AttributeDescription("name", .string),
                    AttributeDescription("count", .integer),
                    AttributeDescription("weight", .double),
                    AttributeDescription("created", .date),
                    AttributeDescription("done", .boolean),
                ]
            )
        ]
    )
}

/// A field of /proc/self/status in KiB (VmRSS, VmHWM).
func statusKiB(_ field: String) -> Int {
    let status = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
    for line in status.split(separator: "\n") where line.hasPrefix(field + ":") {
        return Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "") ?? -1
    }
    return -1
}

/// Resets the process's peak resident set (Linux 4.0+), so VmHWM measures what follows.
func resetPeakResidentSet() {
    if let clear = FileHandle(forWritingAtPath: "/proc/self/clear_refs") {
        clear.write(Data("5".utf8))
        try? clear.close()
    }
}

func runMigrateRSS(_ arguments: [String]) {
    guard arguments.count == 3, let count = Int(arguments[1]) else { fail("usage: migrate-rss COUNT DIR") }
    let directory = URL(fileURLWithPath: arguments[2])
    do {
        let schema = try migrationSchema()
        let registry = StoreRegistry()
        registry.register(SQLiteStore.self)
        let source = directory.appendingPathComponent("source.sqlite")
        let store = try SQLiteStore(url: source, schema: schema, options: StoreOptions(presentsFiles: false))
        var made = 0
        while made < count {
            var changes = StoreChanges()
            for index in made..<min(made + 5000, count) {
                changes.inserts.append(
                    Record(
                        id: .random(entity: "Item"),
                        values: [
                            "name": .string("item \(index) " + String(repeating: "x", count: index % 50)),
                            "count": .integer(Int64(index)),
                            "weight": .double(Double(index) / 7),
                            "created": .date(Date(timeIntervalSinceReferenceDate: Double(index))),
                            "done": .boolean(index % 2 == 0),
                        ]
                    )
                )
            }
            made += changes.inserts.count
            try store.commit(changes)
        }
        store.close()
        resetPeakResidentSet()  // VmHWM now tracks the migration alone
        let before = statusKiB("VmRSS")
        var reports = 0
        try StoreMigrator(registry: registry, batchSize: 1000).migrateStore(
            ofType: "sqlite",
            at: source,
            toType: "sqlite",
            at: directory.appendingPathComponent("copy.sqlite"),
            schema: schema
        ) { progress in
            reports += 1
            if progress.completedRecords == progress.totalRecords {
                say("progress \(reports) \(progress.completedRecords)")
            }
        }
        say("rss \(before) \(statusKiB("VmHWM"))")
    } catch {
        fail("migrate-rss failed: \(error)")
    }
}
