import ConcordTestSupport
import FolderSync
import Foundation
import Persistence
import Testing

@Suite("Sentinels")
struct SentinelTests {
    enum Strategy: String, CaseIterable, Sendable {
        case deviceFiles, deviceList

        func make(_ layout: ContainerLayout) -> any SyncSentinel {
            switch self {
            case .deviceFiles: return DeviceFileSentinel(layout: layout)
            case .deviceList: return DeviceListSentinel(layout: layout)
            }
        }

        var factory: @Sendable (ContainerLayout) -> any SyncSentinel {
            switch self {
            case .deviceFiles: return { DeviceFileSentinel(layout: $0) }
            case .deviceList: return { DeviceListSentinel(layout: $0) }
            }
        }
    }

    static func layout(_ directory: TemporaryDirectory) -> ContainerLayout {
        ContainerLayout(container: directory.makeDirectory("container"), storeName: "notes")
    }

    @Test("register, read and unregister", arguments: Strategy.allCases)
    func roundTrip(strategy: Strategy) throws {
        let directory = TemporaryDirectory("sentinel")
        let sentinel = strategy.make(Self.layout(directory))
        #expect(try sentinel.contents().registrations.isEmpty)
        #expect(try !sentinel.isRegistered("alpha"))
        try sentinel.register(DeviceRegistration(device: "alpha", host: "one", schemaVersion: 1))
        try sentinel.register(DeviceRegistration(device: "beta", host: "two", schemaVersion: 1))
        try sentinel.register(DeviceRegistration(device: "alpha", host: "one-again", schemaVersion: 2))
        let contents = try sentinel.contents()
        #expect(contents.registrations.map(\.device) == ["alpha", "beta"])
        #expect(contents.registrations.first?.host == "one-again")
        #expect(contents.problems.isEmpty)
        #expect(try sentinel.isRegistered("beta"))
        try sentinel.unregister("alpha")
        try sentinel.unregister("nobody")
        #expect(try sentinel.contents().registrations.map(\.device) == ["beta"])
        #expect(try !sentinel.isRegistered("alpha"))
        // Registering again after leaving works (a removal is not forever).
        try sentinel.register(DeviceRegistration(device: "alpha"))
        #expect(try sentinel.isRegistered("alpha"))
        #expect {
            try sentinel.register(DeviceRegistration(device: "../escape"))
        } throws: { ($0 as? SyncError)?.code == .invalidDeviceID }
    }

    @Test("two syncs register in one container", arguments: Strategy.allCases)
    func enablingRegisters(strategy: Strategy) throws {
        let bench = LifecycleBench()
        let alpha = try bench.addDevice("alpha", sentinel: strategy.factory)
        let beta = try bench.addDevice("beta", sentinel: strategy.factory)
        #expect(try alpha.sync.enable().state == .syncing)
        #expect(try beta.sync.enable().state == .syncing)
        #expect(try alpha.sync.sentinel.contents().registrations.map(\.device) == ["alpha", "beta"])
        try beta.sync.disable()
        #expect(beta.sync.state == .off)
        #expect(try alpha.sync.sentinel.contents().registrations.map(\.device) == ["alpha"])
    }

    @Test("one file per device: a damaged file is reported by name, the others are read")
    func damagedDeviceFile() throws {
        let directory = TemporaryDirectory("sentinel")
        let sentinel = DeviceFileSentinel(layout: Self.layout(directory))
        try sentinel.register(DeviceRegistration(device: "alpha"))
        try sentinel.register(DeviceRegistration(device: "beta"))
        let garbage = Data("this is not a property list".utf8)
        try garbage.write(to: sentinel.url(of: "beta"))
        // A file that claims another device's name, and an oversized one.
        try Data(contentsOf: sentinel.url(of: "alpha")).write(to: sentinel.url(of: "gamma"))
        try Data(count: 2 << 20).write(to: sentinel.url(of: "delta"))
        // Strays are not registrations: a temporary, a conflict-looking name, another extension.
        try Data().write(to: sentinel.folder.appendingPathComponent(".alpha.plist.x.concord-tmp"))
        try Data().write(to: sentinel.folder.appendingPathComponent("notes.txt"))
        let contents = try sentinel.contents()
        #expect(contents.registrations.map(\.device) == ["alpha"])
        #expect(
            Set(contents.problems.compactMap { $0.url?.lastPathComponent }) == [
                "beta.plist", "gamma.plist", "delta.plist",
            ]
        )
        #expect(contents.problems.allSatisfy { $0.code == .corruptSentinel })
        #expect(try sentinel.isRegistered("alpha"))
        #expect { try sentinel.isRegistered("beta") } throws: {
            ($0 as? SyncError)?.url?.lastPathComponent == "beta.plist"
        }
        // The damaged file was never rewritten by reading it.
        #expect(try Data(contentsOf: sentinel.url(of: "beta")) == garbage)
    }

    @Test("device list: a sync engine's conflict copies are merged back by union, then folded in")
    func conflictCopiesMerge() throws {
        let directory = TemporaryDirectory("sentinel")
        let layout = Self.layout(directory)
        let sentinel = DeviceListSentinel(layout: layout)
        try sentinel.register(DeviceRegistration(device: "alpha"))
        try sentinel.register(DeviceRegistration(device: "gone"))
        // Another machine registered beta and, later, removed "gone", on its own copy of the list.
        let later = Date().addingTimeInterval(5)
        var copy = [DeviceRegistration(device: "beta")]
        var removed = DeviceRegistration(device: "gone", registered: Date().addingTimeInterval(-100))
        removed.removed = later
        copy.append(removed)
        try Self.writeCopyList(
            copy,
            to: layout.storeFolder.appendingPathComponent("devices.sync-conflict-20261123-101010-ABCDEFG.plist")
        )
        try Self.writeCopyList(
            [DeviceRegistration(device: "gamma")],
            to: layout.storeFolder.appendingPathComponent("devices (Bob's conflicted copy 2026-11-23).plist")
        )
        #expect(try sentinel.contents().registrations.map(\.device) == ["alpha", "beta", "gamma"])
        #expect(try !sentinel.isRegistered("gone"))
        // The next write folds the copies into the list and removes them.
        try sentinel.register(DeviceRegistration(device: "delta"))
        let names = try FileManager.default.contentsOfDirectory(atPath: layout.storeFolder.path).filter {
            $0.hasPrefix("devices") && $0 != "devices"
        }
        #expect(names == ["devices.plist"])
        #expect(try sentinel.contents().registrations.map(\.device) == ["alpha", "beta", "delta", "gamma"])
        #expect(try !sentinel.isRegistered("gone"))
    }

    @Test("device list: the merge does not depend on which version the engine kept as the original")
    func mergeIsSymmetric() throws {
        var one = DeviceRegistration(device: "alpha", registered: Date(timeIntervalSince1970: 100))
        one.removed = Date(timeIntervalSince1970: 200)
        let two = DeviceRegistration(device: "alpha", registered: Date(timeIntervalSince1970: 150))
        let three = DeviceRegistration(device: "beta", registered: Date(timeIntervalSince1970: 100))
        var results: Set<[String]> = []
        for (main, copy) in [([one, three], [two]), ([two], [one, three])] {
            let directory = TemporaryDirectory("sentinel")
            let layout = Self.layout(directory)
            try FileManager.default.createDirectory(at: layout.storeFolder, withIntermediateDirectories: true)
            try Self.writeCopyList(main, to: layout.storeFolder.appendingPathComponent("devices.plist"))
            try Self.writeCopyList(copy, to: layout.storeFolder.appendingPathComponent("devices.conflict1.plist"))
            results.insert(try DeviceListSentinel(layout: layout).contents().registrations.map(\.device))
        }
        // The removal of alpha (stamped 200) beats the registration stamped 150, either way round.
        #expect(results == [["beta"]])
    }

    @Test("device list: a damaged list is reported by name and never overwritten")
    func damagedList() throws {
        let directory = TemporaryDirectory("sentinel")
        let layout = Self.layout(directory)
        let sentinel = DeviceListSentinel(layout: layout)
        try sentinel.register(DeviceRegistration(device: "alpha"))
        let garbage = Data(repeating: 0xA5, count: 300)
        try garbage.write(to: sentinel.listURL)
        #expect { try sentinel.isRegistered("alpha") } throws: {
            ($0 as? SyncError)?.code == .corruptSentinel && ($0 as? SyncError)?.url == sentinel.listURL
        }
        #expect(try sentinel.contents().problems.map(\.url) == [sentinel.listURL])
        #expect { try sentinel.register(DeviceRegistration(device: "beta")) } throws: { error in
            let text = "\(error)"
            return text.contains("devices.plist")
        }
        #expect(try Data(contentsOf: sentinel.listURL) == garbage)
    }

    /// Writes a device list file with exactly these entries.
    static func writeCopyList(_ devices: [DeviceRegistration], to url: URL) throws {
        struct List: Codable { var devices: [DeviceRegistration] }
        let encoder = PropertyListEncoder()
        encoder.outputFormat = .binary
        try encoder.encode(List(devices: devices)).write(to: url)
    }
}
