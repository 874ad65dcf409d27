// The process `make crash` kills (Tests/Crash/crash-trials.sh): one device of a small synced
// store (SQLite, JSON or plist), one command per launch, each saying on standard output what it
// has done as soon as it is done, so the driver knows which saves were acknowledged before the
// kill.
//
//   ConcordCrashHelper COMMAND --store sqlite|json|plist --data DIR --container DIR --device NAME
//
//   save N      saves item N (one record, a 2 KB body that depends only on N), prints
//               `saved N` once the save returned, then exports it and prints `exported`; with
//               CONCORD_CRASH_DIE_ON_FAILURE=1 a failed save prints `failed N: ERROR` and the
//               helper kills itself at once (SIGKILL), the store still open
//   add N       saves item N as an app adds a record: with a new random id (what `notes add`
//               does), printing `saved N`; when the save fails, prints `failed N REASON: ERROR`
//               (REASON: the PersistenceError's reason, or its code) and exits 1. For the
//               `norandom` point, where it must fail: an item it did add is `BAD` to `check`
//   sync        joins if needed, imports, exports, publishes its acknowledgement: `synced`
//   compact     sync, then compacts its own logs: `compacted COUNT`
//   check       opens the store without sync and prints `item N` per intact item, sorted,
//               and `BAD ID: why` for a partial or damaged one; exit 0 if the store opens
import FolderSync
import Foundation
import JSONStore
import Persistence
import PlistStore
import SQLiteStore

#if canImport(Glibc)
import Glibc
#endif

func say(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

func fail(_ message: String, status: Int32 = 1) -> Never {
    FileHandle.standardError.write(Data("ConcordCrashHelper: \(message)\n".utf8))
    exit(status)
}

let schema = try! Schema(
    version: 1,
    entities: [
        EntityDescription(
            "Item",
            attributes: [
                AttributeDescription("title", .string), AttributeDescription("number", .integer),
                AttributeDescription("body", .string),
            ]
        )
    ]
)

/// What item `number` holds: every save writes exactly this.
func body(of number: Int64) -> String {
    String(repeating: "\(number):0123456789abcdef|", count: 2048 / (String(number).count + 18))
}

var arguments = Array(CommandLine.arguments.dropFirst())
guard let command = arguments.first else {
    fail("usage: ConcordCrashHelper COMMAND --store TYPE --data DIR --container DIR --device NAME", status: 64)
}
arguments.removeFirst()
var options: [String: String] = [:]
var positional: [String] = []
while let argument = arguments.first {
    arguments.removeFirst()
    if argument.hasPrefix("--"), let value = arguments.first {
        options[String(argument.dropFirst(2))] = value
        arguments.removeFirst()
    } else {
        positional.append(argument)
    }
}
guard let storeType = options["store"], let data = options["data"] else {
    fail("--store and --data are required", status: 64)
}
let fileName = ["sqlite": "items.sqlite", "json": "items.json", "plist": "items.plist"][storeType]
guard let fileName else { fail("unknown store type \(storeType)", status: 64) }

let registry = StoreRegistry()
registry.register(SQLiteStore.self)
registry.register(JSONStore.self)
registry.register(PlistStore.self)
let coordinator = StoreCoordinator(schema: schema, registry: registry)
try? FileManager.default.createDirectory(atPath: data, withIntermediateDirectories: true)
let store: any PersistentStore
do {
    store = try coordinator.addStore(
        ofType: storeType,
        at: URL(fileURLWithPath: data).appendingPathComponent(fileName),
        options: StoreOptions(presentsFiles: false)
    )
} catch {
    fail("the store does not open: \(error)")
}
defer { store.close() }

/// Sync of this device, enabled and caught up.
@MainActor func startSync() -> FolderSync {
    guard let container = options["container"], let device = options["device"] else {
        fail("--container and --device are required", status: 64)
    }
    do {
        let sync = try FolderSync(
            coordinator: coordinator,
            store: store,
            container: URL(fileURLWithPath: container),
            storeName: "items",
            deviceID: device,
            settleInterval: .zero
        )
        try sync.enable(policy: .default, live: false)
        _ = try sync.importAvailable()
        return sync
    } catch {
        store.close()
        fail("sync does not start: \(error)")
    }
}

do {
    switch command {
    case "save":
        guard let number = positional.first.flatMap(Int64.init) else { fail("usage: save N", status: 64) }
        let sync = startSync()
        let context = ObjectContext(coordinator: coordinator, name: "crash helper save")
        _ = try context.insert(
            entity: "Item",
            id: .deterministic(entity: "Item", name: "item \(number)"),
            values: ["title": .string("item \(number)"), "number": .integer(number), "body": .string(body(of: number))]
        )
        do {
            try context.save()
        } catch  where ProcessInfo.processInfo.environment["CONCORD_CRASH_DIE_ON_FAILURE"] == "1" {
            say("failed \(number): \(error)")
            kill(getpid(), SIGKILL)
        }
        say("saved \(number)")
        try sync.exportPending()
        say("exported")
    case "add":
        guard let number = positional.first.flatMap(Int64.init) else { fail("usage: add N", status: 64) }
        let sync = startSync()
        let context = ObjectContext(coordinator: coordinator, name: "crash helper add")
        do {
            _ = try context.insert(
                entity: "Item",
                values: [
                    "title": .string("item \(number)"), "number": .integer(number), "body": .string(body(of: number)),
                ]
            )
            try context.save()
        } catch let error as PersistenceError {
            say("failed \(number) \(error.reason?.name ?? error.code.rawValue): \(error)")
            store.close()
            exit(1)
        }
        say("saved \(number)")
        try sync.exportPending()
        say("exported")
    case "sync":
        let sync = startSync()
        try sync.exportPending()
        try sync.publishAcknowledgement()
        say("synced")
    case "compact":
        let sync = startSync()
        try sync.exportPending()
        try sync.publishAcknowledgement()
        say("compacted \(try sync.compact())")
    case "check":
        var lines: [String] = []
        for record in try store.fetch(FetchRequest(entity: "Item")) {
            guard case .integer(let number) = record["number"] else {
                lines.append("BAD \(record.id): no number")
                continue
            }
            if record.id != .deterministic(entity: "Item", name: "item \(number)") {
                lines.append("BAD \(record.id): not the id of item \(number)")
            } else if record["title"] != .string("item \(number)") || record["body"] != .string(body(of: number)) {
                lines.append("BAD \(record.id): item \(number) is partial")
            } else {
                lines.append("item \(number)")
            }
        }
        for line in lines.sorted() { say(line) }
    default:
        fail("unknown command \(command)", status: 64)
    }
} catch {
    store.close()
    fail("\(command) failed: \(error)")
}
