import ConcordTestSupport
import FolderSync
import Foundation
import JSONStore
import Persistence
import SQLiteStore
import SyncTestKit
import Testing

/// Several processes of one device share one store, each with its own FolderSync (a watch
/// process and one-shot commands, as an app and its command-line tool do), while another device
/// writes too. Log numbers stay unique, no acknowledged save is lost, and both devices converge.
@Suite("Several processes per device share one synced store", .serialized)
struct MultiProcessStoreSyncTests {
    let directory = TemporaryDirectory("multi-process-store-sync")

    static let registry: StoreRegistry = {
        let registry = StoreRegistry()
        registry.register(JSONStore.self)
        registry.register(SQLiteStore.self)
        return registry
    }()

    /// Saves per process (`CONCORD_SYNC_EDITS` overrides).
    static var saves: Int { ProcessInfo.processInfo.environment["CONCORD_SYNC_EDITS"].flatMap(Int.init) ?? 25 }

    @Test(
        "three processes of one device (two one-shot, one live) and a second device: every save is in one uniquely numbered log, and both devices converge",
        arguments: [("sqlite", "json"), ("json", "sqlite")]
    )
    func processesShareAStore(types: (String, String)) throws {
        let schemaFile = directory("schema.json")
        try JSONEncoder().encode(SyncSimulator.schema).write(to: schemaFile)
        let container = directory.makeDirectory("container")
        let alphaStore = directory("alpha.\(types.0)")
        let betaStore = directory("beta.\(types.1)")
        // alpha's store exists (and has its device id) before the processes race to open it.
        try Self.open(types.0, alphaStore, container: container, device: "alpha").close()
        let runs: [(tag: String, type: String, store: URL, device: String, mode: String)] = [
            ("one", types.0, alphaStore, "alpha", "oneshot"), ("two", types.0, alphaStore, "alpha", "oneshot"),
            ("watch", types.0, alphaStore, "alpha", "live"), ("beta", types.1, betaStore, "beta", "live"),
        ]
        var children: [ChildProcess] = []
        for run in runs {
            children.append(
                try ChildProcess(
                    [
                        "sync-share", run.type, schemaFile.path, run.store.path, container.path, run.device,
                        String(Self.saves), run.tag, run.mode,
                    ],
                    environment: ["CONCORD_DEBUG": "0"]
                )
            )
        }
        var acknowledged: [String: [UUID]] = [:]
        for (child, run) in zip(children, runs) {
            var lines: [String] = []
            var done = false
            while let line = child.readLine(timeout: .seconds(120)) {
                lines.append(line)
                if line == "done" {
                    done = true
                    break
                }
            }
            #expect(done, "\(run.tag) did not finish; it said: \(lines.suffix(10))")
            #expect(
                !lines.contains { $0.hasPrefix("conflict") },
                "\(run.tag): \(lines.filter { $0.hasPrefix("conflict") })"
            )
            #expect(
                !lines.contains { $0.hasPrefix("save-failed") },
                "\(run.tag): \(lines.filter { $0.hasPrefix("save-failed") })"
            )
            acknowledged[run.device, default: []] += lines.compactMap {
                $0.hasPrefix("saved ") ? UUID(uuidString: String($0.dropFirst(6))) : nil
            }
        }
        for (child, run) in zip(children, runs) {
            #expect(child.waitForExit(timeout: .seconds(30)) == 0, "\(run.tag) failed")
        }
        #expect(acknowledged["alpha"]?.count == 3 * Self.saves)

        // alpha's logs: numbered 1...n without a gap or a duplicate, each intact, and together
        // carrying every save its processes acknowledged. Live sync's own maintenance may have
        // folded the first ones, once both devices had applied them, into a baseline (and
        // removed them): the baseline that covers most of alpha's logs stands for those.
        let layout = ContainerLayout(container: container, storeName: "notes")
        var folded: (through: UInt64, payload: BaselinePayload?) = (0, nil)
        for device in ["alpha", "beta"] {
            let folder = layout.deviceFolder(device)
            for name in try FileManager.default.contentsOfDirectory(atPath: folder.path) where name.hasSuffix(".ccbase")
            {
                let url = folder.appendingPathComponent(name)
                let payload = try BaselinePayload.decode(from: try LogFile.decode(Data(contentsOf: url), url: url))
                if payload.covers["alpha", default: 0] > folded.through {
                    folded = (payload.covers["alpha", default: 0], payload)
                }
            }
        }
        let numbers = try layout.logSequences(device: "alpha")
        let highest = max(numbers.last ?? 0, folded.through)
        #expect(
            Set(numbers).union((0..<folded.through).map { $0 + 1 }) == Set((0..<highest).map { $0 + 1 }),
            "alpha's log numbers: \(numbers), folded through \(folded.through)"
        )
        var created = Set(
            (folded.payload?.changes ?? []).filter { $0.created != nil && $0.id.entity == "Note" }.map(\.id.uuid)
        )
        for number in numbers {
            let url = layout.logURL(device: "alpha", sequence: number)
            let payload = try SyncPayload.decode(from: try LogFile.decode(Data(contentsOf: url), url: url))
            created.formUnion(payload.changes.filter { $0.created != nil && $0.id.entity == "Note" }.map(\.id.uuid))
        }
        let lost = Set(acknowledged["alpha"] ?? []).subtracting(created)
        #expect(lost.isEmpty, "acknowledged saves no log carries: \(lost.sorted { $0.uuidString < $1.uuidString })")

        // Both devices apply what the other wrote (bounded rounds: each import may make repairs
        // that the other must apply in turn).
        let alpha = try Self.open(types.0, alphaStore, container: container, device: "alpha")
        let beta = try Self.open(types.1, betaStore, container: container, device: "beta")
        defer {
            alpha.close()
            beta.close()
        }
        for _ in 0..<3 {
            for side in [alpha, beta] {
                try side.sync.importAvailable()
                try side.sync.exportPending()
            }
        }
        let everyone = Set(acknowledged.values.flatMap { $0 })
        for (name, side) in [("alpha", alpha), ("beta", beta)] {
            let notes = Set(try side.store.fetch(FetchRequest(entity: "Note")).map(\.id.uuid))
            #expect(
                everyone.subtracting(notes).isEmpty,
                "\(name) lacks \(everyone.subtracting(notes).count) acknowledged note(s)"
            )
        }
        #expect(try Self.notes(alpha.store) == Self.notes(beta.store))
    }

    struct Side {
        let coordinator: StoreCoordinator
        let store: any PersistentStore
        let sync: FolderSync
        func close() {
            sync.stop()
            coordinator.removeStore(store)
        }
    }

    static func open(_ type: String, _ url: URL, container: URL, device: String) throws -> Side {
        let coordinator = StoreCoordinator(schema: SyncSimulator.schema, registry: registry)
        let store = try coordinator.addStore(ofType: type, at: url, options: StoreOptions(presentsFiles: false))
        let sync = try FolderSync(
            coordinator: coordinator,
            store: store,
            container: container,
            storeName: "notes",
            deviceID: device,
            settleInterval: .milliseconds(500)
        )
        return Side(coordinator: coordinator, store: store, sync: sync)
    }

    /// Every note as "id title", sorted.
    static func notes(_ store: any PersistentStore) throws -> [String] {
        try store.fetch(FetchRequest(entity: "Note")).map { "\($0.id) \($0["title"])" }.sorted()
    }
}
