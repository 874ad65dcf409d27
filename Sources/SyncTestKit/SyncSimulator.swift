import FolderSync
import Foundation
import Persistence
import Synchronization

/// A whole-file store for the simulator's devices (JSON of the Codable snapshot).
public typealias SimulatedStore = WholeFileStore<SimulatedStoreFormat>

/// The simulator's store format: the snapshot's Codable form as JSON.
public enum SimulatedStoreFormat: StoreFileFormat {
    /// `simulated`.
    public static var storeType: String { "simulated" }
    /// The snapshot as JSON.
    public static func encode(_ snapshot: StoreSnapshot, options: StoreOptions) throws -> Data {
        try JSONEncoder().encode(snapshot)
    }
    /// Reads the JSON back; anything else is `corruptStore`.
    public static func decode(_ data: Data, url: URL, options: StoreOptions) throws -> StoreSnapshot {
        do { return try JSONDecoder().decode(StoreSnapshot.self, from: data) } catch {
            throw PersistenceError(.corruptStore, "\(error)", url: url)
        }
    }
}

/// The simulation's time in milliseconds, shared with the devices' clocks.
public final class SimulatedTime: Sendable {
    // Starts at the real time: file modification times (real) and the scanner's clock agree.
    private let value = Mutex<UInt64>(UInt64(Date().timeIntervalSince1970 * 1000))
    /// A clock starting at the real time.
    public init() {}
    /// Milliseconds since 1970.
    public var now: UInt64 { value.withLock { $0 } }
    /// Moves time forward.
    public func advance(by milliseconds: UInt64) { value.withLock { $0 += milliseconds } }
}

/// A small deterministic generator (SplitMix64).
public struct SimulationRandom: RandomNumberGenerator {
    var state: UInt64
    /// A generator for `seed`. The seed is scrambled first: SplitMix64 started from adjacent
    /// seeds as they are would give the same stream shifted by one number.
    public init(seed: UInt64) {
        var scrambled = SimulationRandom(state: seed)
        state = scrambled.next() ^ 0x5DEE_CE66_D1CE_4E5B
    }

    private init(state: UInt64) { self.state = state }
    /// The next number.
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    /// A number in `0..<n`.
    public mutating func below(_ n: Int) -> Int { Int(next() % UInt64(max(n, 1))) }
    /// True `percent` times in a hundred.
    public mutating func chance(_ percent: Int) -> Bool { below(100) < percent }
    /// A version 4 UUID drawn from the generator, so records' ids replay with the seed.
    public mutating func uuid() -> UUID {
        var bytes = [UInt8](repeating: 0, count: 16)
        for half in 0..<2 {
            withUnsafeBytes(of: next().littleEndian) { bytes.replaceSubrange(half * 8..<half * 8 + 8, with: $0) }
        }
        bytes[6] = (bytes[6] & 0x0F) | 0x40
        bytes[8] = (bytes[8] & 0x3F) | 0x80
        return bytes.withUnsafeBytes { UUID(uuid: $0.loadUnaligned(as: uuid_t.self)) }
    }
    /// A new id for `entity` drawn from the generator.
    public mutating func id(_ entity: String) -> ObjectID { ObjectID(entity: entity, uuid: uuid()) }
    /// One of `items`.
    public mutating func pick<T>(_ items: [T]) -> T? { items.isEmpty ? nil : items[below(items.count)] }
}

/// N devices sharing one container through a simulated file-sync engine: every device has its
/// own view of the container; files a device writes reach the others one by one, in an order,
/// with delays, duplicates, partial (non-atomic) deliveries and conflict copies, all drawn from
/// a seed. The same seed replays the same run.
public final class SyncSimulator {
    /// The simulated app's schema: folders, notes and tags.
    public static let schema = try! Schema(
        version: 1,
        entities: [
            EntityDescription(
                "Folder",
                attributes: [AttributeDescription("name", .string)],
                relationships: [
                    RelationshipDescription(
                        "notes",
                        to: "Note",
                        inverse: "folder",
                        isToMany: true,
                        deleteRule: .cascade
                    ),
                    // An owning relationship on an entity with a uniqueness policy: merging two
                    // folders moves the parent over, and undoing it takes it back.
                    RelationshipDescription("parent", to: "Folder", inverse: "children"),
                    RelationshipDescription("children", to: "Folder", inverse: "parent", isToMany: true),
                ]
            ),
            EntityDescription(
                "Note",
                attributes: [
                    AttributeDescription("title", .string),
                    AttributeDescription("rank", .integer, defaultValue: 0),
                    AttributeDescription("pinned", .boolean, defaultValue: false),
                ],
                relationships: [
                    RelationshipDescription("folder", to: "Folder", inverse: "notes"),
                    RelationshipDescription("tags", to: "Tag", inverse: "notes", isToMany: true),
                ]
            ),
            EntityDescription(
                "Tag",
                attributes: [AttributeDescription("label", .string)],
                relationships: [RelationshipDescription("notes", to: "Note", inverse: "tags", isToMany: true)]
            ),
        ]
    )

    /// One process of a simulated device: its own coordinator, store instance and sync engine,
    /// on the device's one store file.
    public struct Process {
        /// Its coordinator.
        public let coordinator: StoreCoordinator
        /// Its store (the device's file, opened by this process).
        public let store: any PersistentStore
        /// Its sync engine.
        public let sync: FolderSync
    }

    /// One simulated device: one store file, shared by one or more processes.
    public struct Device {
        /// Its device id: its machine's name (`deviceN`, which names its store file and its view)
        /// until its store takes a new one.
        public let name: String
        /// Its processes (an app, its command-line tool, a background agent).
        public let processes: [Process]
        /// Its view of the container.
        public let view: URL
        /// Its first process's coordinator.
        public var coordinator: StoreCoordinator { processes[0].coordinator }
        /// Its first process's store.
        public var store: any PersistentStore { processes[0].store }
        /// Its first process's sync engine.
        public var sync: FolderSync { processes[0].sync }
    }

    /// Where a device stands in sync's lifecycle.
    public enum Phase: Sendable, Hashable {
        /// Exporting and importing.
        case syncing
        /// Paused (`FolderSync.pause()`): saves go on, nothing is exported or imported.
        case paused
        /// Disabled (`FolderSync.disable()`): saves go on, nothing is exported or imported, and
        /// the next enable joins as a returning device.
        case disabled
    }

    /// A file on its way from one device's view to another's (or its removal).
    struct Delivery {
        var relativePath: String
        var source: Int
        var target: Int
        var partialDone = false
        /// The source removed the file: the target's copy goes.
        var removal = false
    }

    let directory: URL
    let registry = StoreRegistry()
    let processRange: ClosedRange<Int>
    let lifecycle: Bool
    /// Whether a device that loses its store is now and then a new machine (see ``init``).
    let newMachines: Bool
    /// What every local save did, and what repairs acted on: the invariants are checked against it.
    public let ledger = SimulationLedger()
    var random: SimulationRandom
    /// How far each device's wall clock runs ahead of the simulated time, in milliseconds: up
    /// to two seconds, drawn from the seed (apart from the stream of steps), so that a device's
    /// clock is often ahead of one that acts later.
    let clockSkews: [UInt64]
    /// The devices.
    public internal(set) var devices: [Device] = []
    var pending: [Delivery] = []
    /// For each device, the files of its own it has queued for the others, with the bytes queued.
    var queued: [[String: Data]] = []
    /// Each device's lifecycle phase.
    public internal(set) var phases: [Phase] = []
    /// Every sync engine the run opened, those of processes it replaced included: stopped when
    /// the simulator goes (a sync engine takes part in its coordinator's saves until it stops,
    /// so one never stopped keeps its store, watchers and lock file open).
    private var opened: [FolderSync] = []
    /// For each device, its saves (ledger numbers) not exported yet.
    var unexported: [[Int]] = []
    /// The log number each save committed (ledger number to its device's log sequence).
    var logNumbers: [Int: UInt64] = [:]
    /// The device id each save's log was numbered under (a store may take a new one later).
    var logDevices: [Int: String] = [:]
    /// For each device, its own logs (container-relative paths) that a fault removed from the
    /// container and that it has not published again yet.
    var lostLogs: [Set<String>] = []
    /// Devices away while another device replaced the container: their next join is into
    /// another container.
    var replacedWhileAway = Set<Int>()
    /// For each device whose store took a new device id in this run (``renameAndRejoin(_:)``),
    /// the ids it had before. Such a device keeps its machine: its data is in the logs of several
    /// ids, which the simulator's account of a lost machine does not follow.
    var formerIDs: [Int: [String]] = [:]
    /// For each device that lost its store, the saves of its earlier life (ledger numbers): they
    /// reached the container (the others were given up), and its new store holds them only once
    /// it has restored their logs from there. A removal of the container before then takes the
    /// only copy the device could have merged back (``removeContainer()``).
    var restoring: [Int: Set<Int>] = [:]
    /// What the devices did that they must not (a process under an old id that still saved).
    var lifecycleProblems: [String] = []
    var step: UInt64 = 0
    /// The simulation's time.
    public let time = SimulatedTime()
    /// What happened, step by step (the same for the same seed).
    public internal(set) var trace: [String] = []

    /// `count` devices in a fresh temporary directory, driven by `seed`, each with a number of
    /// processes drawn from `processes` sharing its store.
    /// With `lifecycle`, a device now and then is paused and resumed, is disabled and enabled
    /// again with one of the join choices (replacing the container with its data stops the others,
    /// who come back later into the new container), or loses its store and rejoins under its
    /// name; now and then the container is removed while devices sync (each comes back with a
    /// join choice into the folder the first one starts again), and a process dies between its
    /// commit and its export. With
    /// `newMachines`, a device that loses its store is a new machine half the time: its copy of
    /// the container goes too and refills from the others' copies, in any order, while it syncs.
    public init(
        seed: UInt64,
        devices count: Int,
        processes: ClosedRange<Int> = 1...1,
        lifecycle: Bool = false,
        newMachines: Bool = false
    ) throws {
        self.lifecycle = lifecycle
        self.newMachines = newMachines
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("sync-sim-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        random = SimulationRandom(seed: seed)
        var skews = SimulationRandom(seed: ~seed)
        clockSkews = (0..<count).map { _ in UInt64(skews.below(2_001)) }
        registry.register(SimulatedStore.self)
        processRange = processes
        for index in 0..<count {
            let name = Self.home(index)
            let view = try Self.folder(directory, "views", name)
            devices.append(Device(name: name, processes: try openProcesses(index: index, name: name), view: view))
        }
        queued = Array(repeating: [:], count: count)
        phases = Array(repeating: .syncing, count: count)
        unexported = Array(repeating: [], count: count)
        lostLogs = Array(repeating: [], count: count)
        try shareDeviceFolders()
        try enableEveryDevice()
    }

    /// Opens the processes of device `index` on its store file.
    func openProcesses(index: Int, name: String) throws -> [Process] {
        let storeURL = try Self.folder(directory, "stores").appendingPathComponent("\(Self.home(index)).json")
        let view = try Self.folder(directory, "views", Self.home(index))
        let count = processRange.lowerBound + random.below(processRange.count)
        return try (0..<count).map { _ in try openProcess(index: index, name: name, storeURL: storeURL, view: view) }
    }

    /// Device `index`'s machine: its store file and its view of the container are named after
    /// it (its device id is the same until its store takes a new one).
    static func home(_ index: Int) -> String { "device\(index)" }

    /// Opens one process of device `index` on its store file.
    func openProcess(index: Int, name: String, storeURL: URL, view: URL) throws -> Process {
        let coordinator = StoreCoordinator(schema: Self.schema, registry: registry)
        for entity in ["Note", "Tag", "Folder"] {
            coordinator.policies.register(RecordingRepair(entityName: entity, ledger: ledger))
        }
        // Folders are unique by name, tags by label (as in the Notes sample): duplicates made
        // on two devices are removed by policy, and late references to the losers are
        // redirected.
        coordinator.policies.register(Deduplicate("Folder", .key(["name"])))
        coordinator.policies.register(Deduplicate("Tag", .key(["label"])))
        let store = try coordinator.addStore(
            ofType: "simulated",
            at: storeURL,
            options: StoreOptions(presentsFiles: false)
        )
        // Each device's wall clock runs at its own skew from the simulated time.
        let skew = clockSkews[index]
        let time = self.time
        let sync = try FolderSync(
            coordinator: coordinator,
            store: store,
            container: view,
            storeName: "notes",
            deviceID: name,
            settleInterval: .seconds(30),
            wallClock: { time.now + skew },
            now: { Date(timeIntervalSince1970: Double(time.now) / 1000) }
        )
        // Tombstones go as soon as they are stable: collection runs under every delivery order
        // (but not around a device's absence: see ``absentLifetime``).
        sync.tombstoneLifetime = devices.first?.sync.tombstoneLifetime ?? .zero
        opened.append(sync)
        return Process(coordinator: coordinator, store: store, sync: sync)
    }

    deinit {
        for sync in opened { sync.stop() }
        // (`CONCORD_SYNC_KEEP=PATH` keeps the run's folder there, for `concord doctor` and `concord log`.)
        if let keep = ProcessInfo.processInfo.environment["CONCORD_SYNC_KEEP"] {
            try? FileManager.default.moveItem(
                at: directory,
                to: URL(fileURLWithPath: keep).appendingPathComponent(directory.lastPathComponent)
            )
        } else {
            try? FileManager.default.removeItem(at: directory)
        }
    }

    /// Every device's (empty) folder, as a sync engine carries it to the others once the device
    /// has set up: a device holds compaction back from the start.
    func shareDeviceFolders() throws {
        for device in devices {
            for other in devices { _ = try Self.folder(other.view, "notes", "devices", device.name) }
        }
    }

    static func folder(_ base: URL, _ components: String...) throws -> URL {
        let url = components.reduce(base) { $0.appendingPathComponent($1) }
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }

    // MARK: Steps

    /// Runs `steps` random steps: edits, deliveries, imports.
    public func run(steps: Int) throws {
        for _ in 0..<steps {
            step += 1
            time.advance(by: UInt64(1 + random.below(50)))
            switch random.below(10) {
            case 0...3: try edit(on: random.below(devices.count))
            case 4...7: try deliverOne()
            default:
                if random.chance(25) {
                    try acknowledgeAndCompact(on: random.below(devices.count))
                } else if lifecycle, random.chance(4) {
                    try loseStore(of: random.below(devices.count))
                } else if lifecycle, random.chance(4) {
                    try loseLog(in: random.below(devices.count))
                } else if lifecycle, random.chance(12) {
                    try changePhase(of: random.below(devices.count))
                } else if lifecycle, random.chance(3) {
                    try removeContainer()
                } else {
                    try importOn(random.below(devices.count), mayEnd: true)
                }
            }
        }
    }

    /// Delivers everything still in flight (completing partial files), then lets every device
    /// import until none has anything left to apply.
    /// Devices that are away (paused, disabled) come back first.
    public func settle() throws {
        try bringEveryDeviceBack()
        // Saves a crashed process committed and never exported go out with the next launch.
        for index in devices.indices where !unexported[index].isEmpty { try exportAfterReturn(index) }
        for round in 0..<10 {
            for index in devices.indices { try publish(from: index) }
            while !pending.isEmpty { try deliverOne(complete: true) }
            time.advance(by: 60_000)
            var imported = 0
            for index in devices.indices {
                imported += try importOn(index)
                try publish(from: index)
            }
            // A device that found the container replaced only now comes back.
            if phases.contains(where: { $0 != .syncing }) {
                try bringEveryDeviceBack()
                continue
            }
            // Requests for logs, and their answers, travel too: settled when nothing moves.
            if round >= 2, imported == 0, pending.isEmpty { break }
        }
        restoreTombstoneLifetime()
    }

    /// Every device publishes its acknowledgement and compacts, twice round (the second round
    /// sees everyone's first acknowledgements), with every file delivered in between: afterwards
    /// each device has folded what it can and collected the tombstones that are stable. Everything
    /// in flight has arrived: first the clocks move past `FolderSync.leapWindow`, after which a
    /// restored device's old logs count as arrived (or never coming).
    public func compactEverywhere() throws {
        time.advance(by: UInt64(FolderSync.leapWindow * 1000) + 1)
        for _ in 0..<2 {
            for index in devices.indices { try acknowledgeAndCompact(on: index) }
            try settle()
        }
    }

    /// How many tombstones (clocks of deleted records) device `index` keeps.
    public func tombstones(_ index: Int) throws -> Int { try devices[index].sync.tombstoneCount() }

    /// Every device's records, entity by entity, in id order.
    public func contents(_ index: Int) throws -> [Record] {
        // Another process of the device may have written the file since this one read it.
        try devices[index].store.refresh()
        return try Self.schema.entities.flatMap { try devices[index].store.fetch(FetchRequest(entity: $0.name)) }
    }

    /// The records the device had removed as duplicates in favour of `deleted`: the save that
    /// deleted their winners deleted them too.
    func folded(into deleted: [ObjectID], sync: FolderSync) throws -> [ObjectID] {
        guard !deleted.isEmpty else { return [] }
        let gone = Set(deleted)
        return try ledger.createdRecords.filter { id in
            guard !gone.contains(id), let winner = try sync.replacement(forMissing: id) else { return false }
            return gone.contains(winner)
        }
    }

    func edit(on index: Int) throws {
        let device = devices[index]
        let process = random.below(device.processes.count)
        let changes: ChangeSet
        var writes: [AttributeWrite] = []
        let other = (process + 1 + random.below(max(device.processes.count - 1, 1))) % device.processes.count
        do {
            if other != process, phases[index] == .syncing, random.chance(15) {
                // Another process of the device imports between this save's validation and its
                // commit: what the save read may be folded away or changed under it.
                let importer = device.processes[other].sync
                let racer = ImportBeforeCommit { (try? importer.importAvailable().logs) ?? 0 }
                defer {
                    if racer.imported > 0 {
                        trace.append(
                            "\(step): \(device.name) process \(other) imported \(racer.imported) during a save"
                        )
                    }
                }
                changes = try ImportBeforeCommit.during(
                    saveOf: device.processes[process].coordinator,
                    sync: device.processes[process].sync,
                    racer: racer
                ) {
                    try Self.saveRandomEdits(
                        in: device.processes[process].coordinator,
                        random: &random,
                        writes: &writes
                    )
                }
            } else {
                changes = try Self.saveRandomEdits(
                    in: device.processes[process].coordinator,
                    random: &random,
                    writes: &writes
                )
            }
        } catch let error as PersistenceError where error.reason == .duplicateID {
            // The save inserted a deterministic id that another process of the device saved
            // after this process last read the store (its store is not a file presenter: it
            // reads the file again only under the sync lock), or that an import brought in
            // between validation and commit. An insert never replaces a record: the save is
            // refused whole and nothing is committed, as documented; the app would read again.
            trace.append("\(step): edit on \(device.name) process \(process) refused: \(error.message)")
            return
        }
        let exporter = random.below(device.processes.count)
        let away = phases[index] != .syncing
        let save = ledger.record(
            changes,
            folded: try folded(into: changes.deleted, sync: device.processes[process].sync),
            step: step,
            device: index,
            away: away
        )
        let sequence = try device.processes[process].store.syncMetadata([SyncMetadata.sequence, SyncMetadata.clock])
        logNumbers[save] = sequence[SyncMetadata.sequence]
        // The clock the save's log stamped its writes with (a save that logs nothing writes none).
        if let clock = sequence[SyncMetadata.clock] {
            ledger.recordWrites(
                writes,
                created: changes.inserted,
                updated: changes.updated,
                updatedKeys: changes.updatedKeys,
                clock: clock,
                save: save
            )
        }
        logDevices[save] = device.name
        if away {
            // Paused or disabled: the save keeps its history in the outbox, nothing goes out.
            unexported[index].append(save)
            trace.append("\(step): edit on \(device.name) process \(process), away")
            return
        }
        if lifecycle, random.chance(8) {
            // The process dies between its commit and its export: the outbox keeps the save for
            // whichever process exports next.
            unexported[index].append(save)
            try crash(process, of: index)
            trace.append("\(step): edit on \(device.name) process \(process), which crashed before exporting")
            return
        }
        guard try noticingReplacement(on: index, { try device.processes[exporter].sync.exportPending() }) != nil else {
            unexported[index].append(save)
            return
        }
        unexported[index] = []
        try publish(from: index)
        trace.append(
            "\(step): edit on \(device.name) process \(process) (log \(logNumbers[save].map(String.init) ?? "none"))"
        )
    }
}
