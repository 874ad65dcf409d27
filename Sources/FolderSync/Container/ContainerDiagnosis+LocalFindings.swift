import Foundation
import Persistence

extension ContainerDiagnosis {
    /// What the device's own store says about the container (its marks against the logs there).
    static func localFindings(
        _ local: LocalStoreState,
        diagnosis: StoreFolderDiagnosis,
        layout: ContainerLayout,
        registered: Set<String>
    ) -> [DiagnosisFinding] {
        let store = layout.storeName
        guard let device = local.device else {
            return [
                DiagnosisFinding(
                    .info,
                    "local.noSync",
                    store: store,
                    message: "the local store has never synced (no device id)",
                    advice: "Enable sync on it to join the container: its data is exported, the container's imported."
                )
            ]
        }
        return registrationFindings(local, device: device, diagnosis: diagnosis, registered: registered, store: store)
            + progressFindings(local, device: device, diagnosis: diagnosis, store: store)
    }

    /// The local store's device id against the container's registrations: a new id not joined
    /// yet, a device no longer registered, another installation under its id.
    private static func registrationFindings(
        _ local: LocalStoreState,
        device: String,
        diagnosis: StoreFolderDiagnosis,
        registered: Set<String>,
        store: String
    ) -> [DiagnosisFinding] {
        var found: [DiagnosisFinding] = []
        if local.marks.contains("newDeviceID") {
            found.append(
                DiagnosisFinding(
                    .info,
                    "local.newDeviceID",
                    store: store,
                    device: device,
                    message: "the local store took the device id \(device) and has not joined under it yet",
                    advice:
                        "Enable sync: it joins as a new device, and a merge sends every record it holds under the "
                        + "new id."
                )
            )
        } else if !registered.contains(device) && diagnosis.sentinel != "none" {
            let disabled = local.marks.contains("disabled")
            found.append(
                DiagnosisFinding(
                    disabled ? .info : .warning,
                    "local.notRegistered",
                    store: store,
                    device: device,
                    message:
                        "the local store's device \(device) is not registered\(disabled ? " (sync was disabled)" : "")",
                    advice:
                        "Its next enable is a returning device's: choose to merge its data into the container's to "
                        + "keep both."
                )
            )
        }
        if local.marks.contains("deviceIDInUse") {
            found.append(
                DiagnosisFinding(
                    .problem,
                    "local.deviceIDInUse",
                    store: store,
                    device: device,
                    message:
                        "another installation writes under the device id \(device) (a copied store or a cloned "
                        + "machine): sync stopped here, the local data is kept",
                    advice:
                        "Give this copy a new device id (FolderSync.assignNewDeviceID, without disabling sync "
                        + "first) and enable sync again: its data goes out under the new id. Or stop sync on the "
                        + "other copy and enable sync here again."
                )
            )
        }
        return found
    }

    /// The local store's marks against the container's logs: another container joined, logs not
    /// applied yet, logs committed and not yet exported.
    private static func progressFindings(
        _ local: LocalStoreState,
        device: String,
        diagnosis: StoreFolderDiagnosis,
        store: String
    ) -> [DiagnosisFinding] {
        var found: [DiagnosisFinding] = []
        let identities = Set(diagnosis.containerIDs)
        if !local.containerIDs.isEmpty && !identities.isEmpty && identities.isDisjoint(with: local.containerIDs) {
            found.append(
                DiagnosisFinding(
                    .problem,
                    "identity.mismatch",
                    store: store,
                    device: device,
                    message:
                        "the local store joined container \(local.containerIDs.joined(separator: ", ")); this one is "
                        + "\(identities.sorted().joined(separator: ", "))",
                    advice:
                        "The container was replaced (or this is another one): sync stops and asks how to rejoin. "
                        + "Choose to merge to keep this device's data, or to replace it with the container's."
                )
            )
        }
        let pending = local.pending.values.map(\.count).reduce(0, +)
        if pending > 0 {
            let list = local.pending.sorted { $0.key < $1.key }.map { "\($0.key): \($0.value.count)" }.joined(
                separator: ", "
            )
            found.append(
                DiagnosisFinding(
                    .info,
                    "local.pending",
                    store: store,
                    device: device,
                    message: "\(pending) logs not applied yet (\(list))",
                    advice: "The next sync imports them (those behind a gap wait for it: see log.gap)."
                )
            )
        }
        let exported = diagnosis.devices.first { $0.device == device }?.lastLog ?? 0
        if let committed = local.committed, committed > exported, local.outbox > 0 {
            found.append(
                DiagnosisFinding(
                    .info,
                    "local.unexported",
                    store: store,
                    device: device,
                    message:
                        "the local store committed through log \(committed); the container has through \(exported)",
                    advice: "The next sync exports them from the outbox (compacted logs are covered by a baseline)."
                )
            )
        }
        return found
    }
}
