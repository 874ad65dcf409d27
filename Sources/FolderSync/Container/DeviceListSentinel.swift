import ConcordSystem
import FileCoordination
import Foundation

/// A sentinel kept as one property list, `STORE/devices.plist`, listing every device, read and
/// rewritten under coordination by whichever device registers or leaves.
///
/// Two devices that change the list at once on different machines make a file-sync engine
/// keep both versions, one as a conflict copy (`devices.sync-conflict-….plist`,
/// `devices (… conflicted copy …).plist`, `devices.conflict1.plist`). Readers merge every copy
/// with the list by union: for each device the entry with the later stamp wins (a registration
/// or a removal, which the list keeps as an entry), so the result does not depend on which
/// version the engine called the original. The next write folds the copies into the list and
/// removes them.
public struct DeviceListSentinel: SyncSentinel {
    /// The store's folder, where the list lives.
    public let folder: URL
    /// `devices*`: the list and its conflict copies.
    public var filePattern: String { "devices*.plist*" }
    /// The list: `storeFolder/devices.plist`.
    public var listURL: URL { folder.appendingPathComponent("devices.plist", isDirectory: false) }

    /// The device list of `layout`'s store.
    public init(layout: ContainerLayout) {
        folder = layout.storeFolder
    }

    package struct DeviceList: Codable {
        package var devices: [DeviceRegistration]
    }

    public func contents() throws -> SentinelContents {
        let (merged, _, problems) = try readAll()
        return SentinelContents(registrations: merged.filter { $0.removed == nil }, problems: problems)
    }

    public func isRegistered(_ device: String) throws -> Bool {
        let (merged, _, problems) = try readAll()
        if merged.contains(where: { $0.device == device && $0.removed == nil }) { return true }
        // A damaged list may hide the registration: say so rather than guess.
        if let problem = problems.first { throw problem }
        return false
    }

    public func register(_ registration: DeviceRegistration) throws {
        guard ContainerLayout.isValidDeviceID(registration.device) else {
            throw SyncError(.invalidDeviceID, "\"\(registration.device)\" cannot name a device", url: listURL)
        }
        var registration = registration
        registration.removed = nil
        // Registered alike already, with no conflict copy to fold in: nothing to write.
        if let (merged, copies, problems) = try? readAll(), copies.isEmpty, problems.isEmpty,
            merged.contains(where: { $0.isEquivalent(to: registration) })
        {
            return
        }
        try update { entries in
            // Later than anything recorded for the device, even if this clock stepped back: a
            // registration must not lose to this device's own earlier removal.
            if let previous = entries[registration.device], previous.stamp >= registration.registered {
                registration.registered = previous.stamp.addingTimeInterval(0.001)
            }
            entries[registration.device] = registration
        }
    }

    public func unregister(_ device: String) throws {
        // Nothing to record (and no shared file to rewrite) for a device that is not registered.
        guard try readAll().0.contains(where: { $0.device == device && $0.removed == nil }) else { return }
        try update { entries in
            guard var entry = entries[device], entry.removed == nil else { return }
            entry.removed = max(Date(), entry.registered.addingTimeInterval(0.001))
            entries[device] = entry
        }
    }

    /// Read-modify-write of the list under coordination, folding in conflict copies (which are
    /// removed once the list that includes them is durable).
    private func update(_ change: (inout [String: DeviceRegistration]) -> Void) throws {
        try SentinelFiles.createFolder(folder)
        var folded: [URL] = []
        _ = try SentinelFiles.coordinator.updateContentsOfItem(at: listURL) { old in
            if let old, (try? SentinelFiles.decode(old, url: listURL) as DeviceList) == nil {
                // Never overwrite what cannot be read: it may hold registrations.
                throw SyncError(
                    .corruptSentinel,
                    "the device list cannot be read; move it aside to register again",
                    url: listURL
                )
            }
            let (merged, copies, _) = try readAll(main: old)
            folded = copies
            var entries = Dictionary(merged.map { ($0.device, $0) }, uniquingKeysWith: { $1 })
            change(&entries)
            return try SentinelFiles.encode(DeviceList(devices: entries.values.sorted { $0.device < $1.device }))
        }
        for copy in folded { try? SentinelFiles.remove(copy) }
    }

    /// Every entry of the list and its conflict copies, merged (removals included), the copies
    /// found, and the files that could not be read.
    private func readAll(main: Data?? = nil) throws -> ([DeviceRegistration], [URL], [SyncError]) {
        let listed: [String]?
        do {
            listed = try SyncFiles.listing(of: folder)
        } catch {
            throw SyncError(.containerUnavailable, "cannot list the store folder", url: folder, underlying: error)
        }
        guard let names = listed else { return ([], [], []) }
        var best: [String: DeviceRegistration] = [:]
        var copies: [URL] = []
        var problems: [SyncError] = []
        for name in names.sorted() where name == "devices.plist" || Self.isConflictCopy(name) {
            let url = folder.appendingPathComponent(name, isDirectory: false)
            do {
                let data: Data?
                if name == "devices.plist", let main { data = main } else { data = try SentinelFiles.read(url) }
                guard let data else { continue }
                let list: DeviceList = try SentinelFiles.decode(data, url: url)
                if name != "devices.plist" { copies.append(url) }
                for entry in list.devices where ContainerLayout.isValidDeviceID(entry.device) {
                    if let current = best[entry.device], !Self.supersedes(entry, current) { continue }
                    best[entry.device] = entry
                }
            } catch {
                problems.append(error)
            }
        }
        return (best.values.sorted { $0.device < $1.device }, copies, problems)
    }

    /// The later stamp wins; at equal stamps a removal wins, then the greater encoding, so the
    /// choice is the same whichever file an entry came from.
    static func supersedes(_ entry: DeviceRegistration, _ current: DeviceRegistration) -> Bool {
        if entry.stamp != current.stamp { return entry.stamp > current.stamp }
        if (entry.removed != nil) != (current.removed != nil) { return entry.removed != nil }
        return (entry.host ?? "", entry.registered) > (current.host ?? "", current.registered)
    }

    /// A file-sync engine's conflict copy of `devices.plist`: Syncthing, Dropbox and Nextcloud,
    /// rclone bisync.
    static func isConflictCopy(_ name: String) -> Bool {
        guard name.hasPrefix("devices") else { return false }
        return (name.hasPrefix("devices.sync-conflict-") && name.hasSuffix(".plist"))
            || (name.hasPrefix("devices (") && name.contains("conflicted copy") && name.hasSuffix(").plist"))
            || (name.hasPrefix("devices.conflict") && name.hasSuffix(".plist"))
            || name == "devices.plist..path1" || name == "devices.plist..path2"
    }
}
