import FolderSync
import Foundation

// The sentinel's files and the container's identity: small property lists in a container,
// written by other devices.

extension FuzzTarget {
    /// A device's registration (`sentinels/DEVICE.plist`) or a device list (`devices.plist`),
    /// read as both sentinels read them: errors name the file, and what decodes round-trips
    /// through the sentinels' own encoder.
    static let sentinel = FuzzTarget("sentinel", "SentinelFiles.decode: registrations and device lists") {
        data,
        url throws(FuzzFinding) in
        let registration: Result<DeviceRegistration, SyncError> = Result { () throws(SyncError) in
            try SentinelFiles.decode(data, url: url)
        }
        let list: Result<DeviceListSentinel.DeviceList, SyncError> = Result { () throws(SyncError) in
            try SentinelFiles.decode(data, url: url)
        }
        if case .success(let registration) = registration {
            let again: DeviceRegistration = try roundTrip(registration, "sentinel", url: url)
            try check(
                again == registration || registration.registered.timeIntervalSinceReferenceDate.isNaN
                    || registration.removed?.timeIntervalSinceReferenceDate.isNaN == true,
                "sentinel",
                "a registration changes in a round trip"
            )
        }
        if case .success(let list) = list {
            let again: DeviceListSentinel.DeviceList = try roundTrip(list, "sentinel", url: url)
            try check(again.devices.count == list.devices.count, "sentinel", "a device list changes in a round trip")
            // What the list sentinel does with entries: keep one per device.
            _ = Dictionary(list.devices.map { ($0.device, $0) }, uniquingKeysWith: { $1 })
        }
        switch (registration, list) {
        case (.failure(let error), .failure): return .rejected(error, namedFile: url)
        default: return .decoded
        }
    }

    /// The container's identity (`container.plist` and its conflict copies).
    static let containerIdentity = FuzzTarget("container-identity", "ContainerIdentity: container.plist") {
        data,
        url throws(FuzzFinding) in
        let identity: ContainerIdentity
        do {
            identity = try SentinelFiles.decode(data, url: url)
        } catch {
            return .rejected(error, namedFile: url)
        }
        let again: ContainerIdentity = try roundTrip(identity, "container-identity", url: url)
        let created = identity.created.timeIntervalSinceReferenceDate
        try check(
            again.id == identity.id && again.device == identity.device
                && (again.created.timeIntervalSinceReferenceDate.bitPattern == created.bitPattern || created.isNaN),
            "container-identity",
            "an identity changes in a round trip"
        )
        return .decoded
    }

    /// `value` encoded as the sentinels encode and decoded again.
    private static func roundTrip<T: Codable>(_ value: T, _ target: String, url: URL) throws(FuzzFinding) -> T {
        let data = try must(target, "encoding") { try SentinelFiles.encode(value) }
        return try must(target, "decoding what was encoded") { () throws -> T in
            try SentinelFiles.decode(data, url: url)
        }
    }
}

extension FuzzOutcome {
    /// Whether the input decoded.
    package var isDecoded: Bool {
        if case .decoded = self { return true }
        return false
    }
}
