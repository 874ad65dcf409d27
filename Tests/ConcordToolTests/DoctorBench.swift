import ConcordTestSupport
import FolderSync
import Foundation
import JSONStore
import Persistence
import SQLiteStore
import SyncTestKit
import Testing

/// Devices that sync one store through one container in a temporary directory, driven through
/// FolderSync's real API (one-shot: exports and imports are called by the test), so that a test
/// can build a container, damage it, and diagnose it.
final class DoctorBench {
    struct Device {
        let name: String
        let url: URL
        let coordinator: StoreCoordinator
        let store: any PersistentStore
        let sync: FolderSync
    }

    static let storeName = "notes"
    let directory = TemporaryDirectory("doctor")
    let registry = StoreRegistry()
    var devices: [String: Device] = [:]
    var container: URL { directory("container") }
    var layout: ContainerLayout { ContainerLayout(container: container, storeName: Self.storeName) }

    init() {
        registry.register(SQLiteStore.self)
        registry.register(JSONStore.self)
        _ = directory.makeDirectory("container")
    }

    deinit {
        for device in devices.values {
            device.sync.stop()
            device.store.close()
        }
    }

    subscript(name: String) -> Device { devices[name]! }

    /// A device with a store of `type`, its wall clock `skew` milliseconds off, sync enabled (with
    /// `deviceList`, registered in a ``DeviceListSentinel``).
    @discardableResult
    func addDevice(
        _ name: String,
        type: String = "sqlite",
        schema: Schema = SyncSimulator.schema,
        skew: Int64 = 0,
        deviceList: Bool = false
    ) throws -> Device {
        let url = directory.makeDirectory("data", name).appendingPathComponent("notes.\(type)")
        let coordinator = StoreCoordinator(schema: schema, registry: registry)
        let store = try coordinator.addStore(ofType: type, at: url, options: StoreOptions(presentsFiles: false))
        let sync = try FolderSync(
            coordinator: coordinator,
            store: store,
            container: container,
            storeName: Self.storeName,
            deviceID: name,
            settleInterval: .milliseconds(1),
            wallClock: { UInt64(Int64(Date().timeIntervalSince1970 * 1000) + skew) },
            sentinel: deviceList ? Self.deviceListSentinel : nil
        )
        try sync.enable(live: false)
        let device = Device(name: name, url: url, coordinator: coordinator, store: store, sync: sync)
        devices[name] = device
        return device
    }

    @Sendable static func deviceListSentinel(_ layout: ContainerLayout) -> any SyncSentinel {
        DeviceListSentinel(layout: layout)
    }

    /// Inserts a note on `name` and exports it as one log.
    @discardableResult
    func addNote(_ name: String, _ title: String) throws -> ObjectID {
        let device = self[name]
        let context = ObjectContext(coordinator: device.coordinator, origin: .local, name: name)
        let record = try context.insert(entity: "Note", values: ["title": .string(title)])
        try context.save()
        try device.sync.exportPending()
        return record.id
    }

    /// Deletes `id` on `name` and exports it.
    func delete(_ name: String, _ id: ObjectID) throws {
        let device = self[name]
        let context = ObjectContext(coordinator: device.coordinator, origin: .local, name: name)
        try context.delete(id)
        try context.save()
        try device.sync.exportPending()
    }

    /// Imports what `name` can on its next pass.
    @discardableResult
    func importOn(_ name: String) throws -> ImportReport { try self[name].sync.importAvailable() }

    func logURL(_ device: String, _ sequence: UInt64) -> URL { layout.logURL(device: device, sequence: sequence) }

    /// The diagnosis, with `local`'s store as this machine's.
    func diagnose(local: String? = nil) throws -> ContainerDiagnosis {
        let metadata = try local.map { try self[$0].store.metadata() }
        return ContainerDiagnosis.diagnose(
            container: container,
            storeName: Self.storeName,
            local: metadata?.entries,
            localSchemaVersion: metadata?.schemaVersion
        )
    }

    /// Makes `url` look written `seconds` ago.
    func age(_ url: URL, by seconds: TimeInterval) throws {
        try FileManager.default.setAttributes(
            [.modificationDate: Date().addingTimeInterval(-seconds)],
            ofItemAtPath: url.path
        )
    }
}

extension ContainerDiagnosis {
    /// The codes of the findings, sorted.
    var codes: [String] { findings.map(\.code).sorted() }

    /// The findings with `code`.
    func findings(_ code: String) -> [DiagnosisFinding] { findings.filter { $0.code == code } }

    /// The device named `name` in the only store.
    func device(_ name: String) -> DeviceDiagnosis? { stores.first?.devices.first { $0.device == name } }
}
