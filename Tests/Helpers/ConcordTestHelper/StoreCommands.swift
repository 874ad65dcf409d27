// Store commands for the presenter-driven store tests. The schema comes as a JSON file (the
// test writes it with JSONEncoder), so the helper and the test use one definition.
//
//   store-insert TYPE SCHEMA_JSON PATH COUNT   opens the store, commits COUNT new "Item" records
//                                             (title "helper N") in one commit, closes it; with
//                                             CONCORD_HELPER_DIE_ON_FAILURE=1, a failed commit is
//                                             printed ("failed: ERROR") and the helper kills
//                                             itself (SIGKILL) with the store still open
//   store-move TYPE FROM TO                   StoreCoordinator.moveStore: a coordinated move of
//                                             all of the store's files
//   store-delete TYPE PATH                    StoreCoordinator.destroyStore: a coordinated
//                                             removal of all of the store's files
//
// Each prints "done" when it has finished.
import Foundation
import JSONStore
import Persistence
import PlistStore
import SQLiteStore

/// The three shipped plugins.
func storeRegistry() -> StoreRegistry {
    let registry = StoreRegistry()
    registry.register(JSONStore.self)
    registry.register(PlistStore.self)
    registry.register(SQLiteStore.self)
    return registry
}

/// Runs one `store-*` command.
func runStoreCommand(_ arguments: [String]) {
    let registry = storeRegistry()
    do {
        switch arguments[0] {
        case "store-insert":
            guard arguments.count == 5, let count = Int(arguments[4]) else {
                fail("usage: store-insert TYPE SCHEMA_JSON PATH COUNT")
            }
            let schema = try JSONDecoder().decode(
                Schema.self,
                from: Data(contentsOf: URL(fileURLWithPath: arguments[2]))
            )
            let type = try registry.storeType(named: arguments[1])
            let store = try type.init(
                url: URL(fileURLWithPath: arguments[3]),
                schema: schema,
                options: StoreOptions(presentsFiles: false)
            )
            let records = (0..<count).map { index in
                Record(id: .random(entity: "Item"), values: ["title": .string("helper \(index)")])
            }
            do {
                try store.commit(StoreChanges(inserts: records))
            } catch  where ProcessInfo.processInfo.environment["CONCORD_HELPER_DIE_ON_FAILURE"] == "1" {
                say("failed: \(error)")
                dieNow()
            }
            store.close()
        case "store-move":
            guard arguments.count == 4 else { fail("usage: store-move TYPE FROM TO") }
            try StoreCoordinator.moveStore(
                ofType: arguments[1],
                from: URL(fileURLWithPath: arguments[2]),
                to: URL(fileURLWithPath: arguments[3]),
                registry: registry
            )
        case "store-delete":
            guard arguments.count == 3 else { fail("usage: store-delete TYPE PATH") }
            try StoreCoordinator.destroyStore(
                ofType: arguments[1],
                at: URL(fileURLWithPath: arguments[2]),
                registry: registry
            )
        default:
            fail("unknown store command \(arguments[0])")
        }
    } catch {
        fail("\(arguments[0]) failed: \(error)")
    }
    say("done")
}
