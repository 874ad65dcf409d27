import Foundation

// Grading by need, and the temporaries left in sentinels/.
extension FindingsBuilder {
    /// Why no registered device needs `owner`'s log `sequence` any more (`nil`: one may): a
    /// baseline covers it, or every other registered device's acknowledgement says it applied
    /// it (a device with no acknowledgement may need it).
    func coverage(of owner: String, _ sequence: UInt64) -> String? {
        if sequence <= ContainerDiagnosis.baselineFloors(reading)[owner] ?? 0 { return "a baseline covers it" }
        let others = registered.subtracting([owner]).sorted()
        guard !others.isEmpty else { return nil }
        for other in others {
            let applied = diagnosis.devices.first { $0.device == other }?.acknowledgement?.applied[owner]
            guard let applied, applied >= sequence else { return nil }
        }
        return "every other registered device (\(others.joined(separator: ", "))) applied it"
    }

    /// Temporary files in `sentinels/` (a registration written under a temporary name and
    /// renamed into place): a stale one of Concord's is a write that was interrupted.
    mutating func sentinelTemporaries() {
        let folder = DeviceFileSentinel(layout: layout).folder
        let names = SyncFiles.names(in: folder).sorted()
        for name in names {
            guard case .temporary = ContainerLayout.classify(fileName: name) else { continue }
            let url = folder.appendingPathComponent(name, isDirectory: false)
            let age = ContainerDiagnosis.modificationDate(url).map { now.timeIntervalSince($0) }
            let owner = ContainerLayout.temporaryOwner(name) ?? "a sync engine"
            let old = (age ?? 0) >= stale && owner == "Concord"
            add(
                old ? .warning : .info,
                "file.temporary",
                path: url.path,
                "\(owner == "Concord" ? "Concord's" : "\(owner)'s") temporary file in the sentinel folder"
                    + (age.map { ", last modified \(ContainerDiagnosis.seconds($0)) ago" } ?? ""),
                old
                    ? "Left by a registration write that was interrupted (a crash or a kill): delete it when no "
                        + "process of this store's devices is running."
                    : "A write in progress, or a sync engine's transfer: look again later."
            )
        }
    }
}
