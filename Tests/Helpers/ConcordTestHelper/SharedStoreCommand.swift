// The command for MultiProcessStoreSyncTests: one of several processes of one device that share
// one store.
//
//   sync-share TYPE SCHEMA_JSON STORE CONTAINER DEVICE COUNT TAG MODE
//
// Opens the store (TYPE: sqlite, json, plist) with FolderSync as DEVICE, enables sync and says
// "ready". MODE `oneshot`: makes COUNT saves, each inserting one note titled "TAG-i", exporting
// after each (as a command-line tool does), importing every few saves. MODE `live`: starts live
// sync (exports after saves, imports on arrival, as an app's watch process does) and makes the
// same saves (a one-shot process syncs live too, but also exports and imports itself, as the
// Notes sample's commands do before they exit). After each save it says "saved UUID" (an acknowledged save), then "done" once its
// queued work ended; a failed save is "save-failed MESSAGE", any sync event about a log name
// conflict is "conflict MESSAGE".
import FolderSync
import Foundation
import Persistence
import SyncTestKit

func runSyncShare(_ arguments: [String]) {
    guard arguments.count == 9, let count = Int(arguments[6]), ["oneshot", "live"].contains(arguments[8]) else {
        fail("usage: sync-share TYPE SCHEMA_JSON STORE CONTAINER DEVICE COUNT TAG oneshot|live")
    }
    let (type, device, tag, live) = (arguments[1], arguments[5], arguments[7], arguments[8] == "live")
    do {
        let schema = try JSONDecoder().decode(Schema.self, from: Data(contentsOf: URL(fileURLWithPath: arguments[2])))
        let coordinator = StoreCoordinator(schema: schema, registry: storeRegistry())
        let store = try coordinator.addStore(
            ofType: type,
            at: URL(fileURLWithPath: arguments[3]),
            options: StoreOptions(presentsFiles: true)
        )
        let sync = try FolderSync(
            coordinator: coordinator,
            store: store,
            container: URL(fileURLWithPath: arguments[4]),
            storeName: "notes",
            deviceID: device,
            settleInterval: .milliseconds(500)
        )
        let observer = NotificationCenter.default.addObserver(forName: .concordSyncEvent, object: sync, queue: nil) {
            note in
            switch note.userInfo?["event"] as? SyncEvent {
            case .logConflict(let error)?: say("conflict \(error)")
            case .failed(let message)?:
                FileHandle.standardError.write(Data("ConcordTestHelper \(device): \(message)\n".utf8))
            default: break
            }
        }
        defer { NotificationCenter.default.removeObserver(observer) }
        guard try sync.enable().state == .syncing else { fail("sync did not start") }
        say("ready")
        for index in 0..<count {
            do {
                let context = ObjectContext(coordinator: coordinator, origin: .local, name: "\(tag)-\(index)")
                let note = try context.insert(entity: "Note", values: ["title": .string("\(tag)-\(index)")])
                try context.save()
                if !live {
                    try sync.exportPending()
                    if index % 4 == 3 { try sync.importAvailable() }
                }
                say("saved \(note.id.uuid.uuidString)")
            } catch {
                say("save-failed \(error)")
            }
        }
        if live { sync.waitForQueuedWork() } else { try sync.exportPending() }
        sync.stop()
        say("done")
        coordinator.removeStore(store)
    } catch {
        fail("sync-share failed: \(error)")
    }
}
