// The command for ImportMemoryTests.
//
//   import-rss COUNT DIR [baseline | scattered]
//
// Builds a container holding COUNT items (and a group per hundred) exported by one device, as
// `join-rss` does, then a second device with an empty SQLite store imports all of it. Says
// "imported LOGS CHANGES" and "rss BEFORE PEAK" (KiB: resident before the import, and the peak
// during it alone). With `baseline`, the exporting device compacts first (its logs go, a
// baseline holds everything) and the second device starts from the baseline: LOGS is then 0.
// With `scattered`, the exporting store lacks the groups' sides of the relationship (written
// without a context), so the export cannot keep each group's items together: every log names
// items of most groups, as logs of saves that each touch many groups would.
import FolderSync
import Foundation
import Persistence
import SQLiteStore

func runImportRSS(_ arguments: [String]) {
    guard arguments.count == 3 || (arguments.count == 4 && ["baseline", "scattered"].contains(arguments[3])),
        let count = Int(arguments[1])
    else { fail("usage: import-rss COUNT DIR [baseline | scattered]") }
    let fromBaseline = arguments.count == 4 && arguments[3] == "baseline"
    let scattered = arguments.count == 4 && arguments[3] == "scattered"
    let directory = URL(fileURLWithPath: arguments[2])
    do {
        let schema = try joinSchema()
        let registry = StoreRegistry()
        registry.register(SQLiteStore.self)
        let container = directory.appendingPathComponent("container")
        try FileManager.default.createDirectory(at: container, withIntermediateDirectories: true)
        // The exporting device: COUNT items joined to sync (logs of a thousand records each).
        do {
            let coordinator = StoreCoordinator(schema: schema, registry: registry)
            let store = try coordinator.addStore(
                ofType: "sqlite",
                at: directory.appendingPathComponent("source.sqlite"),
                options: StoreOptions(presentsFiles: false)
            )
            var made = 0
            while made < count {
                // As a context saves them: both sides of each relationship.
                var changes = StoreChanges()
                var group = Record(id: .random(entity: "Group"), values: ["name": .string("group \(made / 100)")])
                for index in made..<min(made + 100, count) {
                    changes.inserts.append(
                        Record(
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
                    )
                }
                if !scattered { group.toMany["items"] = Set(changes.inserts.map(\.id)) }
                changes.inserts.append(group)
                made = min(made + 100, count)
                try store.commit(changes)
            }
            let sync = try FolderSync(
                coordinator: coordinator,
                store: store,
                container: container,
                storeName: "items",
                deviceID: "source"
            )
            _ = try sync.exportExistingData()
            if fromBaseline {
                try sync.publishAcknowledgement()
                let removed = try sync.compact()
                guard removed > 0 else { fail("import-rss: compaction removed no log") }
            }
            sync.stop()
            coordinator.removeStore(store)
        }
        // The importing device.
        let coordinator = StoreCoordinator(schema: schema, registry: registry)
        let store = try coordinator.addStore(
            ofType: "sqlite",
            at: directory.appendingPathComponent("importer.sqlite"),
            options: StoreOptions(presentsFiles: false)
        )
        let sync = try FolderSync(
            coordinator: coordinator,
            store: store,
            container: container,
            storeName: "items",
            deviceID: "importer"
        )
        resetPeakResidentSet()
        let before = statusKiB("VmRSS")
        let clock = ContinuousClock()
        let began = clock.now
        let started = fromBaseline ? try sync.startFromBaseline() : 0
        let afterStart = clock.now
        let report = try sync.importAvailable()
        if fromBaseline { say("start took \(afterStart - began)") }
        let peak = statusKiB("VmHWM")
        say("imported \(report.logs) \(report.changes + started)")
        say("took \(clock.now - began)")
        say("rss \(before) \(peak)")
        sync.stop()
    } catch {
        fail("import-rss failed: \(error)")
    }
}
